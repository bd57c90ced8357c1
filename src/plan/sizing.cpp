#include "plan/sizing.h"

#include <cctype>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"

namespace ridge::plan {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string bytes_text(double bytes_per_value) {
  return bytes_per_value == std::floor(bytes_per_value) ? str_cat(format_fixed(bytes_per_value, 0), " B")
                                                       : str_cat(bytes_per_value, " B");
}

// Per-token sizes are small: exact bytes, then KiB/MiB.
std::string small_bytes(double bytes) {
  std::string out = str_cat(format_count(static_cast<int64_t>(std::llround(bytes))), " B");
  if (bytes >= 1024) out += str_cat(" = ", format_iec(bytes));
  if (bytes >= 0.25 * kMiB && bytes < kMiB) out += str_cat(" (", format_fixed(bytes / kMiB, 2), " MiB)");
  return out;
}

// KV heads a rank holds: its share, or one repeated head when there are more ranks.
int32_t rank_kv_heads(const ModelShape& m, int tp) {
  if (m.n_head % tp != 0)
    throw Error(str_cat("--tp ", tp, ": ", m.display, " has ", m.n_head, " attention heads, which do not divide by ", tp));
  if (m.n_kv_head % tp == 0) return m.n_kv_head / tp;
  if (tp % m.n_kv_head == 0) return 1;
  throw Error(str_cat("--tp ", tp, ": ", m.display, " has ", m.n_kv_head, " KV heads; ", tp,
                      " ranks must divide them or be a multiple of them"));
}

template <class Line>
SizeReport add_tensor_parallel(const ModelShape& m, const Deployment& d, SizeReport& r, Line&& line) {
  const int tp = d.tp;
  const int32_t kv_heads = rank_kv_heads(m, tp);
  line("tensor parallel", str_cat(tp, " ranks: ", m.n_head, " / ", tp, " = ", m.n_head / tp, " query heads and ",
                                  kv_heads, " of ", m.n_kv_head, " KV heads each", kv_heads * tp > m.n_kv_head ? " (repeated)" : ""),
       "");
  const double whole = d.weights.from_file ? m.file_whole_bytes
                                           : static_cast<double>(m.n_whole_params) * d.weights.bytes_per_value;
  const double split = r.weight_bytes - whole;
  r.rank_weight_bytes = split / tp + whole;
  line("  weights per rank", str_cat(format_si(split), " (layers, output) / ", tp, " + ", format_si(whole),
                                     " (embedding, norms: whole)"),
       format_both(r.rank_weight_bytes));
  const double share = static_cast<double>(kv_heads) / m.n_kv_head;
  r.rank_kv_bytes_per_token = r.kv_bytes_per_token * share;
  r.rank_kv_bytes_per_conversation = r.kv_bytes_per_conversation * share;
  line("  KV per token per rank", str_cat(format_count(static_cast<int64_t>(r.kv_bytes_per_token)), " B x ", kv_heads,
                                          " / ", m.n_kv_head, " KV heads"),
       small_bytes(r.rank_kv_bytes_per_token));
  line("  KV per conversation per rank", str_cat(format_si(r.kv_bytes_per_conversation), " x ", kv_heads, " / ",
                                                 m.n_kv_head),
       format_both(r.rank_kv_bytes_per_conversation));
  const double reduce = 2.0 * m.n_layer * m.n_embd * 4.0;
  line("  all-reduce per token", str_cat("2 x ", m.n_layer, " layers x ", m.n_embd, " x 4 B (f32), each rank"),
       small_bytes(reduce));
  if (!d.gpus) return r;
  const GpuSpec& g = *d.gpus;
  if (g.count != tp)
    throw Error(str_cat("--tp ", tp, " needs one device or host per rank: --gpus ", tp, "xSIZE, not ", g.count, "x"));
  r.total_bytes = g.total_bytes();
  r.reserve_bytes = d.reserve.of(r.total_bytes);
  const double rank_reserve = r.reserve_bytes / tp;
  const double rank_free = g.bytes_each - r.rank_weight_bytes - rank_reserve;
  r.free_bytes = rank_free * tp;
  line("  memory per rank", str_cat(format_both(g.bytes_each), rank_reserve > 0 ? str_cat(", reserve ", format_si(rank_reserve)) : ""),
       "");
  line("  free for KV per rank", str_cat(format_si(g.bytes_each), " - ", format_si(r.rank_weight_bytes), " (weights)",
                                         rank_reserve > 0 ? str_cat(" - ", format_si(rank_reserve), " (reserve)") : ""),
       rank_free >= 0 ? format_both(rank_free) : str_cat(format_both(rank_free), ": the weights do not fit"));
  if (rank_free > 0) {
    const double ratio = rank_free / r.rank_kv_bytes_per_conversation;
    r.max_conversations = static_cast<int64_t>(std::floor(ratio));
    line("max concurrent", str_cat("floor(", format_si(rank_free), " / ", format_si(r.rank_kv_bytes_per_conversation),
                                   ") = floor(", format_fixed(ratio, 2), ")"),
         str_cat(format_count(r.max_conversations), " conversations of ", format_count(d.ctx), " tokens"));
  } else {
    line("max concurrent", "no memory left for the KV cache on a rank", "0 conversations");
  }
  return r;
}

}  // namespace

NumberFormat parse_weight_format(std::string_view text) {
  const std::string t = lower(text);
  if (t == "bf16") return {"bf16", 2.0, false, "2 B"};
  if (t == "fp16" || t == "f16") return {"fp16", 2.0, false, "2 B"};
  if (t == "fp32" || t == "f32") return {"fp32", 4.0, false, "4 B"};
  if (t == "int8") return {"int8", 1.0, false, "1 B, scales not counted; Q8_0 stores 1.0625 B"};
  if (t == "int4") return {"int4", 0.5, false, "0.5 B, scales not counted; Q4_0 stores 0.5625 B"};
  if (t == "file") return {"file", 0.0, true, "as stored in the GGUF"};
  if (std::optional<DType> d = dtype_from_name(text)) {
    const TypeTraits& tr = type_traits(*d);
    if (tr.block_size > 0)
      return {std::string(tr.name), static_cast<double>(tr.type_size) / static_cast<double>(tr.block_size), false,
              str_cat(tr.type_size, " B per ", tr.block_size, " values")};
  }
  throw Error(str_cat("--weights '", text, "': unknown format (use bf16, fp16, fp32, int8, int4, file, "
                      "or a GGUF tensor type such as q8_0 or q4_K)"));
}

NumberFormat parse_kv_format(std::string_view text) {
  const std::string t = lower(text);
  if (t == "fp16" || t == "f16") return {"fp16", 2.0, false, "2 B"};
  if (t == "bf16") return {"bf16", 2.0, false, "2 B"};
  if (t == "fp32" || t == "f32") return {"fp32", 4.0, false, "4 B"};
  if (t == "int8") return {"int8", 1.0, false, "1 B, scales not counted"};
  // ridge's own quantized caches: GGML blocks of 32 values with an f16 scale.
  if (t == "q8_0") return {"q8_0", 34.0 / 32.0, false, "34 B per 32 values"};
  if (t == "q4_0") return {"q4_0", 18.0 / 32.0, false, "18 B per 32 values"};
  throw Error(str_cat("--kv '", text, "': unknown KV cache type (use fp16, bf16, q8_0, q4_0, int8 or fp32)"));
}

double kv_bytes_for_context(const ModelShape& model, double kv_bytes_per_value, int64_t ctx) {
  const double per_layer_token = 2.0 * model.n_kv_head * model.d_head * kv_bytes_per_value;
  double total = 0.0;
  for (int32_t window : model.layer_window) {
    const int64_t held = window > 0 ? std::min<int64_t>(ctx, window) : ctx;
    total += per_layer_token * static_cast<double>(held);
  }
  return total;
}

double weight_bytes(const ModelShape& model, const NumberFormat& weights) {
  if (!weights.from_file) return static_cast<double>(model.n_params) * weights.bytes_per_value;
  if (!(model.file_weight_bytes > 0))
    throw Error(str_cat("--weights file: '", model.id, "' is a preset, not a GGUF file; "
                        "choose bf16, fp16, int8, int4 or a GGUF type such as q4_K"));
  return model.file_weight_bytes;
}

SizeReport compute_size(const ModelShape& m, const Deployment& d) {
  if (d.ctx < 1) throw Error(str_cat("--ctx ", d.ctx, ": the context must be at least 1 token"));
  if (d.tp < 1) throw Error(str_cat("--tp ", d.tp, ": at least 1 rank"));
  SizeReport r;
  auto line = [&](std::string label, std::string formula, std::string result) {
    r.lines.push_back({std::move(label), std::move(formula), std::move(result)});
  };

  r.weight_bytes = weight_bytes(m, d.weights);
  r.weight_bytes_per_param = r.weight_bytes / static_cast<double>(m.n_params);
  if (d.weights.from_file)
    line("weights", str_cat(format_count(m.n_params), " params as stored (", m.file_weight_types, "), ",
                            format_fixed(r.weight_bytes_per_param, 3), " B/param"),
         format_both(r.weight_bytes));
  else
    line("weights", str_cat(format_count(m.n_params), " params x ", bytes_text(d.weights.bytes_per_value),
                            " (", d.weights.name, ")"),
         format_both(r.weight_bytes));

  const double b = d.kv.bytes_per_value;
  const auto n_kv_layers = static_cast<int64_t>(m.layer_window.size());
  r.kv_bytes_per_token = 2.0 * static_cast<double>(n_kv_layers) * m.n_kv_head * m.d_head * b;
  line("KV per token", str_cat("2 (K,V) x ", n_kv_layers, m.n_recurrent_layers > 0 ? " attention" : "",
                               " layers x ", m.n_kv_head, " KV heads x ", m.d_head, " dims x ", bytes_text(b), " (",
                               d.kv.name, ")"),
       small_bytes(r.kv_bytes_per_token));

  r.kv_bytes_per_conversation = kv_bytes_for_context(m, b, d.ctx);
  const auto groups = m.layers_by_window();
  if (m.n_recurrent_layers > 0) {
    // A hybrid: K/V of the attention layers grows with the context, the recurrent layers'
    // state does not.
    r.state_bytes_per_sequence = m.state_bytes_per_sequence;
    line("recurrent state per sequence", str_cat(m.n_recurrent_layers, " recurrent layers (conv tail + state, f32), ",
                                                 "whatever the context"),
         format_both(r.state_bytes_per_sequence));
    const double kv = r.kv_bytes_per_conversation;
    r.kv_bytes_per_conversation += r.state_bytes_per_sequence;
    line("KV + state per conversation", str_cat(format_si(kv), " (K/V of ", format_count(d.ctx), " tokens) + ",
                                                format_si(r.state_bytes_per_sequence), " (state)"),
         format_both(r.kv_bytes_per_conversation));
  } else if (groups.size() == 1 && groups.begin()->first == 0) {
    line("KV per conversation", str_cat(format_count(static_cast<int64_t>(r.kv_bytes_per_token)), " B x ",
                                        format_count(d.ctx), " tokens"),
         format_both(r.kv_bytes_per_conversation));
  } else {
    std::string sum;
    for (const auto& [window, layers] : groups) {
      const int64_t held = window > 0 ? std::min<int64_t>(d.ctx, window) : d.ctx;
      const double bytes = 2.0 * layers * m.n_kv_head * m.d_head * b * static_cast<double>(held);
      std::string tokens = window > 0 ? str_cat("min(", format_count(d.ctx), ", ", format_count(window), ") tokens")
                                      : str_cat(format_count(d.ctx), " tokens");
      line(window > 0 ? str_cat("  window-", window, " layers") : std::string("  global layers"),
           str_cat("2 x ", layers, " layers x ", m.n_kv_head, " x ", m.d_head, " x ", bytes_text(b), " x ", tokens),
           format_both(bytes));
      sum += str_cat(sum.empty() ? "" : " + ", format_si(bytes));
    }
    line("KV per conversation", sum, format_both(r.kv_bytes_per_conversation));
    line("  average per token", str_cat(format_si(r.kv_bytes_per_conversation), " / ", format_count(d.ctx), " tokens"),
         small_bytes(r.kv_bytes_per_conversation / static_cast<double>(d.ctx)));
  }

  if (d.tp > 1) return add_tensor_parallel(m, d, r, line);
  if (!d.gpus) return r;
  const GpuSpec& g = *d.gpus;
  r.total_bytes = g.total_bytes();
  r.reserve_bytes = d.reserve.of(r.total_bytes);
  r.free_bytes = r.total_bytes - r.weight_bytes - r.reserve_bytes;
  line("GPU memory", str_cat(g.count, " x ", format_both(g.bytes_each)), format_both(r.total_bytes));
  if (r.reserve_bytes > 0) line("reserve", d.reserve.describe(), format_both(r.reserve_bytes));
  line("free for KV", str_cat(format_si(r.total_bytes), " - ", format_si(r.weight_bytes), " (weights) - ",
                              r.reserve_bytes > 0 ? format_si(r.reserve_bytes) : std::string("0"), " (reserve)"),
       r.free_bytes >= 0 ? format_both(r.free_bytes) : str_cat(format_both(r.free_bytes), ": the weights do not fit"));
  if (r.free_bytes > 0) {
    const double ratio = r.free_bytes / r.kv_bytes_per_conversation;
    r.max_conversations = static_cast<int64_t>(std::floor(ratio));
    line("max concurrent", str_cat("floor(", format_si(r.free_bytes), " / ", format_si(r.kv_bytes_per_conversation),
                                   ") = floor(", format_fixed(ratio, 2), ")"),
         str_cat(format_count(r.max_conversations), " conversations of ", format_count(d.ctx), " tokens"));
  } else {
    line("max concurrent", "no memory left for the KV cache", "0 conversations");
  }
  if (g.count > 1)
    line("  per GPU", str_cat("(weights + KV of ", format_count(r.max_conversations), " conversations) / ", g.count,
                              ", split evenly (tensor parallel)"),
         str_cat(format_si(r.weight_bytes / g.count), " + ",
                 format_si(static_cast<double>(r.max_conversations) * r.kv_bytes_per_conversation / g.count)));
  return r;
}

}  // namespace ridge::plan
