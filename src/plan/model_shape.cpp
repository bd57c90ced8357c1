#include "plan/model_shape.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/dtype.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "plan/units.h"

namespace ridge::plan {
namespace {

std::string normalized(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '-' && c != '_' && c != '.' && c != ' ') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  // Values from each model's config.json (Hugging Face). Columns: n_embd, n_layer, n_head,
  // n_kv_head, d_head, n_ff, n_vocab, tied, qkv_bias, qk_norm, norms/layer, window, global_every.
  static const std::vector<ModelPreset> presets = {
      {"llama2-7b", "Llama 2 7B", "meta-llama/Llama-2-7b-hf", 4096, 32, 32, 32, 128, 11008, 32000, false, false, false, 2, 0, 0, ""},
      {"llama2-13b", "Llama 2 13B", "meta-llama/Llama-2-13b-hf", 5120, 40, 40, 40, 128, 13824, 32000, false, false, false, 2, 0, 0, ""},
      {"llama2-70b", "Llama 2 70B", "meta-llama/Llama-2-70b-hf", 8192, 80, 64, 8, 128, 28672, 32000, false, false, false, 2, 0, 0, ""},
      {"llama3-8b", "Llama 3 8B", "meta-llama/Meta-Llama-3-8B", 4096, 32, 32, 8, 128, 14336, 128256, false, false, false, 2, 0, 0, ""},
      {"llama3-70b", "Llama 3 70B", "meta-llama/Meta-Llama-3-70B", 8192, 80, 64, 8, 128, 28672, 128256, false, false, false, 2, 0, 0, ""},
      {"llama3.1-405b", "Llama 3.1 405B", "meta-llama/Llama-3.1-405B", 16384, 126, 128, 8, 128, 53248, 128256, false, false, false, 2, 0, 0, ""},
      {"mistral-7b", "Mistral 7B v0.1", "mistralai/Mistral-7B-v0.1", 4096, 32, 32, 8, 128, 14336, 32000, false, false, false, 2, 4096, 0,
       "v0.1 attends over a 4,096-token sliding window in every layer; v0.2 and later dropped it (mistral-7b-v0.3)"},
      {"mistral-7b-v0.3", "Mistral 7B v0.3", "mistralai/Mistral-7B-v0.3", 4096, 32, 32, 8, 128, 14336, 32768, false, false, false, 2, 0, 0, ""},
      {"qwen2.5-0.5b", "Qwen2.5 0.5B", "Qwen/Qwen2.5-0.5B", 896, 24, 14, 2, 64, 4864, 151936, true, true, false, 2, 0, 0, ""},
      {"qwen2.5-1.5b", "Qwen2.5 1.5B", "Qwen/Qwen2.5-1.5B", 1536, 28, 12, 2, 128, 8960, 151936, true, true, false, 2, 0, 0, ""},
      {"qwen2.5-3b", "Qwen2.5 3B", "Qwen/Qwen2.5-3B", 2048, 36, 16, 2, 128, 11008, 151936, true, true, false, 2, 0, 0, ""},
      {"qwen2.5-7b", "Qwen2.5 7B", "Qwen/Qwen2.5-7B", 3584, 28, 28, 4, 128, 18944, 152064, false, true, false, 2, 0, 0, ""},
      {"qwen2.5-14b", "Qwen2.5 14B", "Qwen/Qwen2.5-14B", 5120, 48, 40, 8, 128, 13824, 152064, false, true, false, 2, 0, 0, ""},
      {"qwen2.5-32b", "Qwen2.5 32B", "Qwen/Qwen2.5-32B", 5120, 64, 40, 8, 128, 27648, 152064, false, true, false, 2, 0, 0, ""},
      {"qwen2.5-72b", "Qwen2.5 72B", "Qwen/Qwen2.5-72B", 8192, 80, 64, 8, 128, 29568, 152064, false, true, false, 2, 0, 0, ""},
      {"gemma3-270m", "Gemma 3 270M", "google/gemma-3-270m", 640, 18, 4, 1, 256, 2048, 262144, true, false, true, 4, 512, 6, ""},
      {"gemma3-1b", "Gemma 3 1B", "google/gemma-3-1b-pt", 1152, 26, 4, 1, 256, 6912, 262144, true, false, true, 4, 512, 6, ""},
      {"gemma3-4b", "Gemma 3 4B", "google/gemma-3-4b-pt", 2560, 34, 8, 4, 256, 10240, 262208, true, false, true, 4, 1024, 6,
       "language model only; the multimodal checkpoint adds a ~0.4 B SigLIP vision encoder"},
      {"gemma3-12b", "Gemma 3 12B", "google/gemma-3-12b-pt", 3840, 48, 16, 8, 256, 15360, 262208, true, false, true, 4, 1024, 6,
       "language model only; the multimodal checkpoint adds a ~0.4 B SigLIP vision encoder"},
      {"gemma3-27b", "Gemma 3 27B", "google/gemma-3-27b-pt", 5376, 62, 32, 16, 128, 21504, 262208, true, false, true, 4, 1024, 6,
       "language model only; the multimodal checkpoint adds a ~0.4 B SigLIP vision encoder"},
  };
  return presets;
}

const ModelPreset* find_model_preset(std::string_view id) {
  const std::string key = normalized(id);
  for (const ModelPreset& p : model_presets())
    if (normalized(p.id) == key) return &p;
  return nullptr;
}

std::string model_preset_ids() {
  std::string out;
  for (const ModelPreset& p : model_presets()) out += str_cat(out.empty() ? "" : ", ", p.id);
  return out;
}

int64_t count_params(const ModelPreset& p) {
  const int64_t d = p.n_embd, q = int64_t{p.n_head} * p.d_head, kv = int64_t{p.n_kv_head} * p.d_head;
  int64_t attention = d * q + 2 * d * kv + q * d;  // wq, wk, wv, wo
  if (p.qkv_bias) attention += q + 2 * kv;
  const int64_t mlp = 3 * d * p.n_ff;  // gate, up, down
  int64_t norms = p.norms_per_layer * d;
  if (p.qk_norm) norms += 2 * int64_t{p.d_head};
  const int64_t embeddings = int64_t{p.n_vocab} * d * (p.tied_embeddings ? 1 : 2);
  return embeddings + p.n_layer * (attention + mlp + norms) + d;  // + final norm
}

ModelShape shape_from_preset(const ModelPreset& p) {
  ModelShape m;
  m.id = p.id;
  m.display = p.display;
  m.source = str_cat("preset: ", p.repo, " config.json");
  m.note = p.note;
  m.n_params = count_params(p);
  m.n_whole_params = int64_t{p.n_vocab} * p.n_embd +
                     p.n_layer * (int64_t{p.norms_per_layer} * p.n_embd + (p.qk_norm ? 2 * int64_t{p.d_head} : 0)) +
                     p.n_embd;
  m.n_layer = p.n_layer;
  m.n_embd = p.n_embd;
  m.n_head = p.n_head;
  m.n_kv_head = p.n_kv_head;
  m.d_head = p.d_head;
  m.n_ff = p.n_ff;
  m.n_vocab = p.n_vocab;
  m.layer_window.assign(p.n_layer, 0);
  if (p.window > 0)
    for (int il = 0; il < p.n_layer; ++il)
      if (p.global_every == 0 || il % p.global_every != p.global_every - 1) m.layer_window[il] = p.window;
  return m;
}

namespace {

// The tensors tensor parallelism splits (model/tensor_parallel.h): projections,
// feed-forward matrices (dense or experts'), the q/k/v biases and the output matrix.
bool is_split_tensor(const std::string& name) {
  if (name == "output.weight") return true;
  if (name.rfind("blk.", 0) != 0) return false;
  for (const char* part : {".attn_q.", ".attn_k.", ".attn_v.", ".attn_qkv.", ".attn_output.", ".ffn_gate", ".ffn_up",
                           ".ffn_down"})
    if (name.find(part) != std::string::npos) return name.find("_inp.") == std::string::npos;
  return false;
}

}  // namespace

ModelShape shape_from_gguf(const gguf::File& file) {
  const ModelConfig c = ModelConfig::from_gguf(file);
  ModelShape m;
  m.id = std::filesystem::path(file.name()).filename().string();
  m.display = c.name.empty() ? m.id : c.name;
  m.source = file.name();
  m.n_layer = c.n_layer;
  m.n_embd = c.n_embd;
  m.n_head = c.n_head;
  m.n_kv_head = c.n_kv_head;
  m.d_head = c.d_head;
  m.n_ff = c.n_ff;
  m.n_vocab = c.n_vocab;
  for (int32_t il = 0; il < c.n_layer; ++il) {
    if (c.layers[static_cast<size_t>(il)].kind == LayerKind::kAttention) {
      m.layer_window.push_back(c.layers[static_cast<size_t>(il)].window);
    } else {
      ++m.n_recurrent_layers;
      m.state_bytes_per_sequence += 4.0 * static_cast<double>(c.state_floats(il));
    }
  }

  std::map<std::string, double> bytes_by_type;
  for (const gguf::TensorInfo& t : file.tensors()) {
    m.n_params += t.n_elements();
    m.file_weight_bytes += static_cast<double>(t.nbytes);
    if (!is_split_tensor(t.name)) {
      m.n_whole_params += t.n_elements();
      m.file_whole_bytes += static_cast<double>(t.nbytes);
    }
    bytes_by_type[std::string(dtype_name(t.dtype))] += static_cast<double>(t.nbytes);
  }
  std::vector<std::pair<double, std::string>> by_size;
  for (const auto& [name, bytes] : bytes_by_type) by_size.emplace_back(bytes, name);
  std::sort(by_size.rbegin(), by_size.rend());
  for (const auto& [bytes, name] : by_size)
    m.file_weight_types += str_cat(m.file_weight_types.empty() ? "" : ", ", name, " ",
                                   format_fixed(100.0 * bytes / std::max(1.0, m.file_weight_bytes), 0), "%");
  return m;
}

ModelShape load_model_shape(const std::string& model,
                            const std::function<std::string(const std::string&)>& resolve_path) {
  if (const ModelPreset* preset = find_model_preset(model)) return shape_from_preset(*preset);
  std::string path;
  try {
    path = resolve_path(model);
  } catch (const Error& e) {
    throw Error(str_cat("unknown model '", model, "': not a preset (", model_preset_ids(), ") and ", e.what()));
  }
  return shape_from_gguf(gguf::File::open(path));
}

std::map<int32_t, int> ModelShape::layers_by_window() const {
  std::map<int32_t, int> out;
  for (int32_t w : layer_window) ++out[w];
  return out;
}

std::string ModelShape::summary() const {
  const double n = static_cast<double>(n_params);
  const std::string params = n >= 1e9   ? str_cat(format_fixed(n / 1e9, 2), " B")
                             : n >= 1e6 ? str_cat(format_fixed(n / 1e6, 1), " M")
                                        : format_count(n_params);
  std::string s = str_cat(n_layer, " layers, ", n_head, " heads (", n_kv_head, " KV) x ", d_head, ", ", params, " params");
  for (const auto& [window, layers] : layers_by_window())
    if (window > 0) s += str_cat(", ", layers, " layers with a ", format_count(window), "-token window");
  return s;
}

}  // namespace ridge::plan
