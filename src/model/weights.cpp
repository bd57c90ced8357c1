#include "model/weights.h"

#include <set>
#include <string>

#include "core/error.h"
#include "core/quant.h"
#include "gguf/gguf.h"
#include "kernels/ops/ops.h"

namespace ridge {
namespace {

std::string dims_string(std::initializer_list<int64_t> dims) {
  std::string s = "[";
  for (int64_t d : dims) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + "]";
}

class Loader {
 public:
  Loader(const gguf::File& f, std::vector<std::vector<float>>& owned) : f_(f), owned_(owned) {}

  const gguf::TensorInfo& tensor(const std::string& name, std::initializer_list<int64_t> dims) {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (t == nullptr) throw Error(str_cat(f_.name(), ": tensor '", name, "' is missing"));
    used_.insert(name);
    bool ok = t->n_dims == static_cast<int>(dims.size());
    int d = 0;
    for (int64_t want : dims) ok = ok && t->ne[d++] == want;
    if (!ok)
      throw Error(str_cat(f_.name(), ": tensor '", name, "' has shape ", t->shape_string(), ", expected ",
                          dims_string(dims)));
    return *t;
  }

  // A 2-D weight used by matmul: ne = [n_in, n_out].
  kernels::WeightMatrix matrix(const std::string& name, int64_t n_in, int64_t n_out) {
    const gguf::TensorInfo& t = tensor(name, {n_in, n_out});
    kernels::WeightMatrix w{t.dtype, n_in, n_out, t.data, row_size(t.dtype, n_in)};
    kernels::check_weight_matrix(w, what(name));
    return w;
  }

  // A stack of n matrices (ne = [n_in, n_out, n]): one zero-copy view per matrix.
  std::vector<kernels::WeightMatrix> matrices(const std::string& name, int64_t n_in, int64_t n_out, int64_t n) {
    const gguf::TensorInfo& t = tensor(name, {n_in, n_out, n});
    const size_t row = row_size(t.dtype, n_in);
    std::vector<kernels::WeightMatrix> views;
    for (int64_t e = 0; e < n; ++e) {
      views.push_back({t.dtype, n_in, n_out, t.data + static_cast<size_t>(e * n_out) * row, row});
      kernels::check_weight_matrix(views.back(), what(name));
    }
    return views;
  }

  // A 1-D vector (norm weight, bias) as f32: the mapping itself when stored as f32.
  const float* vector(const std::string& name, int64_t n) {
    const gguf::TensorInfo& t = tensor(name, {n});
    if (t.dtype == DType::F32) return reinterpret_cast<const float*>(t.data);
    std::vector<float>& copy = owned_.emplace_back(static_cast<size_t>(n));
    try {
      dequantize_row(t.dtype, t.data, copy.data(), n);
    } catch (const Error& e) {
      throw Error(str_cat(what(name), ": ", e.what()));
    }
    return copy.data();
  }

  // A 2-D float tensor (ne = [n0, n1]) as f32 [n1][n0]: the mapping itself when stored as f32.
  const float* floats(const std::string& name, int64_t n0, int64_t n1) {
    const gguf::TensorInfo& t = tensor(name, {n0, n1});
    if (t.dtype == DType::F32) return reinterpret_cast<const float*>(t.data);
    std::vector<float>& copy = owned_.emplace_back(static_cast<size_t>(n0 * n1));
    try {
      for (int64_t r = 0; r < n1; ++r)
        dequantize_row(t.dtype, t.data + static_cast<size_t>(r) * row_size(t.dtype, n0), copy.data() + r * n0, n0);
    } catch (const Error& e) {
      throw Error(str_cat(what(name), ": ", e.what()));
    }
    return copy.data();
  }

  // Marks every tensor of blocks first.. as used (blocks the model loads but does not run).
  void skip_blocks_from(int32_t first) {
    for (const gguf::TensorInfo& t : f_.tensors()) {
      if (t.name.rfind("blk.", 0) != 0) continue;
      const size_t dot = t.name.find('.', 4);
      const std::string index = t.name.substr(4, dot == std::string::npos ? std::string::npos : dot - 4);
      if (!index.empty() && index.find_first_not_of("0123456789") == std::string::npos && std::stoll(index) >= first)
        used_.insert(t.name);
    }
  }

  // The per-tensor output scale of a matrix (MatrixScales): <stem>.scale where the file has
  // one, else 1; <stem>.input_scale is marked used (llama.cpp never applies it).
  float scale_of(const std::string& weight_name) {
    const std::string stem = weight_name.substr(0, weight_name.rfind(".weight"));
    if (has(stem + ".input_scale")) tensor(stem + ".input_scale", {1});
    if (!has(stem + ".scale")) return 1.0f;
    return vector(stem + ".scale", 1)[0];
  }
  // The same for an expert tensor: one scale per expert (<stem>.scale {n_expert}), 1 without.
  std::vector<float> expert_scales_of(const std::string& weight_name, int64_t n_expert) {
    const std::string stem = weight_name.substr(0, weight_name.rfind(".weight"));
    if (has(stem + ".input_scale")) tensor(stem + ".input_scale", {n_expert});
    if (!has(stem + ".scale")) return std::vector<float>(static_cast<size_t>(n_expert), 1.0f);
    const float* s = vector(stem + ".scale", n_expert);
    return std::vector<float>(s, s + n_expert);
  }

  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }

  // How errors about a tensor name it: "model.gguf: tensor 'blk.0.attn_q.weight'".
  std::string what(const std::string& name) const { return str_cat(f_.name(), ": tensor '", name, "'"); }

  // Every tensor of the file must have been used: a tensor nothing reads means a variant
  // this code does not implement, and computing without it would be silently wrong.
  void check_all_used(const std::string& arch) const {
    for (const gguf::TensorInfo& t : f_.tensors())
      if (used_.count(t.name) == 0)
        throw Error(str_cat(f_.name(), ": tensor '", t.name, "' ", t.shape_string(), " is not used by ridge's ", arch,
                            " model; refusing to run without it (an unsupported variant of the architecture?)"));
  }

 private:
  const gguf::File& f_;
  std::vector<std::vector<float>>& owned_;
  std::set<std::string> used_;
};

// Rows [first, first + n) of a matrix: one part of a fused tensor, zero-copy.
kernels::WeightMatrix rows(const kernels::WeightMatrix& w, int64_t first, int64_t n) {
  return {w.dtype, w.n_in, n, w.data + static_cast<size_t>(first) * w.row_bytes, w.row_bytes};
}

}  // namespace

void apply_scale(float* y, int64_t n, float s) {
  if (s != 1.0f) kernels::scale(y, n, s);
}

ModelWeights ModelWeights::load(const gguf::File& f, const ModelConfig& c) {
  ModelWeights w;
  Loader ld(f, w.owned_);
  const int64_t q_dim = int64_t{c.n_head} * c.d_head;
  const int64_t kv_dim = int64_t{c.n_kv_head} * c.d_head;
  // Qwen3-Next / 3.5: attn_q holds each head's q and its output gate.
  const int64_t q_rows = c.attn_output_gate ? 2 * q_dim : q_dim;
  w.token_embd = ld.matrix("token_embd.weight", c.n_embd, c.n_vocab);
  w.output_norm = ld.vector("output_norm.weight", c.n_embd);
  w.output = ld.has("output.weight") ? ld.matrix("output.weight", c.n_embd, c.n_vocab) : w.token_embd;
  if (ld.has("output.weight")) w.output_scale = ld.scale_of("output.weight");
  if (ld.has("rope_freqs.weight")) w.rope_freqs = ld.vector("rope_freqs.weight", c.n_rot / 2);
  if (ld.has("rope_factors_long.weight") || ld.has("rope_factors_short.weight")) {
    if (c.arch != "phi3" || w.rope_freqs != nullptr)
      throw Error(str_cat(f.name(), ": LongRoPE factors (rope_factors_long/short.weight) are only supported for phi3, "
                          "without rope_freqs.weight"));
    w.rope_factors_long = ld.vector("rope_factors_long.weight", c.n_rot / 2);
    w.rope_factors_short = ld.vector("rope_factors_short.weight", c.n_rot / 2);
  }
  w.layers.resize(c.n_layer);
  for (int il = 0; il < c.n_layer; ++il) {
    LayerWeights& l = w.layers[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    l.attn_norm = ld.vector(p + "attn_norm.weight", c.n_embd);
    if (c.layers[il].kind == LayerKind::kDeltaNet) {
      const int64_t key_dim = int64_t{c.ssm_groups} * c.ssm_state, value_dim = c.ssm_inner;
      const int64_t channels = 2 * key_dim + value_dim;
      // Qwen3-Next before attn_qkv/attn_gate: ssm_in. With both, llama.cpp computes with
      // attn_qkv and loads ssm_in unused; so does ridge.
      if (c.ssm_grouped_heads && ld.has(p + "ssm_in.weight")) {
        l.ssm_in = ld.matrix(p + "ssm_in.weight", c.n_embd, channels + value_dim);
        l.ssm_in_scale = ld.scale_of(p + "ssm_in.weight");
      }
      if (!c.ssm_grouped_heads || ld.has(p + "attn_qkv.weight") || !ld.has(p + "ssm_in.weight")) {
        l.ssm_in = {};
        l.ssm_qkv = ld.matrix(p + "attn_qkv.weight", c.n_embd, channels);
        l.ssm_z = ld.matrix(p + "attn_gate.weight", c.n_embd, value_dim);
      }
      if (c.ssm_grouped_heads) {
        l.ssm_ba = ld.matrix(p + "ssm_ba.weight", c.n_embd, 2 * int64_t{c.ssm_heads});
        l.ssm_ba_scale = ld.scale_of(p + "ssm_ba.weight");
      } else {
        l.ssm_beta = ld.matrix(p + "ssm_beta.weight", c.n_embd, c.ssm_heads);
        l.ssm_alpha = ld.matrix(p + "ssm_alpha.weight", c.n_embd, c.ssm_heads);
      }
      l.ssm_conv = ld.floats(p + "ssm_conv1d.weight", c.ssm_conv_kernel, channels);
      l.ssm_dt = ld.vector(p + "ssm_dt.bias", c.ssm_heads);
      l.ssm_a = ld.vector(p + "ssm_a", c.ssm_heads);
      l.ssm_norm = ld.vector(p + "ssm_norm.weight", value_dim / c.ssm_heads);
      l.ssm_out = ld.matrix(p + "ssm_out.weight", value_dim, c.n_embd);
    } else if ((c.fused_qkv || c.attn_output_gate) && ld.has(p + "attn_qkv.weight")) {
      // Phi-3 (and Qwen 3.5's attention layers): q, k and v in one attn_qkv tensor as
      // llama.cpp's converter writes them, or in three (its model saver, fine-tuning tools),
      // which llama.cpp loads as well.
      const kernels::WeightMatrix qkv = ld.matrix(p + "attn_qkv.weight", c.n_embd, q_rows + 2 * kv_dim);
      l.wq = rows(qkv, 0, q_rows);
      l.wk = rows(qkv, q_rows, kv_dim);
      l.wv = rows(qkv, q_rows + kv_dim, kv_dim);
    } else {
      l.wq = ld.matrix(p + "attn_q.weight", c.n_embd, q_rows);
      l.wk = ld.matrix(p + "attn_k.weight", c.n_embd, kv_dim);
      l.wv = ld.matrix(p + "attn_v.weight", c.n_embd, kv_dim);
    }
    if (c.layers[il].kind == LayerKind::kAttention) {
      // Qwen2: biases always; Qwen 3.5's attention layers: where the file has them, as
      // llama.cpp loads them (its model saver writes them; the converter does not), q's
      // covering the gate rows too.
      if (c.qkv_bias || (c.attn_output_gate && ld.has(p + "attn_q.bias"))) {
        l.bq = ld.vector(p + "attn_q.bias", q_rows);
        l.bk = ld.vector(p + "attn_k.bias", kv_dim);
        l.bv = ld.vector(p + "attn_v.bias", kv_dim);
      }
      if (c.qk_norm || c.qk_norm_full) {
        l.q_norm = ld.vector(p + "attn_q_norm.weight", c.qk_norm ? c.d_head : q_dim);
        l.k_norm = ld.vector(p + "attn_k_norm.weight", c.qk_norm ? c.d_head : kv_dim);
      }
      l.wo = ld.matrix(p + "attn_output.weight", q_dim, c.n_embd);
    }
    if (c.sandwich_norm) l.post_attn_norm = ld.vector(p + "post_attention_norm.weight", c.n_embd);
    l.ffn_norm = ld.vector(p + (c.post_attn_ffn_norm ? "post_attention_norm.weight" : "ffn_norm.weight"), c.n_embd);
    if (c.n_expert > 0) {
      l.gate_inp = ld.matrix(p + "ffn_gate_inp.weight", c.n_embd, c.n_expert);
      const auto downs = ld.matrices(p + "ffn_down_exps.weight", c.n_ff_expert, c.n_embd, c.n_expert);
      if (ld.has(p + "ffn_gate_up_exps.weight")) {  // the converter's --fuse-gate-up-exps: gate rows, then up
        const auto gate_ups = ld.matrices(p + "ffn_gate_up_exps.weight", c.n_embd, 2 * int64_t{c.n_ff_expert}, c.n_expert);
        for (int e = 0; e < c.n_expert; ++e)
          l.experts.push_back({rows(gate_ups[e], 0, c.n_ff_expert), rows(gate_ups[e], c.n_ff_expert, c.n_ff_expert),
                               downs[e]});
      } else {
        const auto gates = ld.matrices(p + "ffn_gate_exps.weight", c.n_embd, c.n_ff_expert, c.n_expert);
        const auto ups = ld.matrices(p + "ffn_up_exps.weight", c.n_embd, c.n_ff_expert, c.n_expert);
        const std::vector<float> gs = ld.expert_scales_of(p + "ffn_gate_exps.weight", c.n_expert);
        const std::vector<float> us = ld.expert_scales_of(p + "ffn_up_exps.weight", c.n_expert);
        for (int e = 0; e < c.n_expert; ++e) l.experts.push_back({gates[e], ups[e], downs[e], gs[e], us[e]});
      }
      const std::vector<float> ds = ld.expert_scales_of(p + "ffn_down_exps.weight", c.n_expert);
      for (int e = 0; e < c.n_expert; ++e) l.experts[static_cast<size_t>(e)].down_scale = ds[static_cast<size_t>(e)];
      if (c.n_ff_shared > 0) {
        l.shared_gate = ld.vector(p + "ffn_gate_inp_shexp.weight", c.n_embd);
        l.shared = {ld.matrix(p + "ffn_gate_shexp.weight", c.n_embd, c.n_ff_shared),
                    ld.matrix(p + "ffn_up_shexp.weight", c.n_embd, c.n_ff_shared),
                    ld.matrix(p + "ffn_down_shexp.weight", c.n_ff_shared, c.n_embd),
                    ld.scale_of(p + "ffn_gate_shexp.weight"), ld.scale_of(p + "ffn_up_shexp.weight"),
                    ld.scale_of(p + "ffn_down_shexp.weight")};
      }
    } else if (c.fused_gate_up) {
      const kernels::WeightMatrix gate_up = ld.matrix(p + "ffn_up.weight", c.n_embd, 2 * int64_t{c.n_ff});
      l.w_gate = rows(gate_up, 0, c.n_ff);
      l.w_up = rows(gate_up, c.n_ff, c.n_ff);
      l.w_down = ld.matrix(p + "ffn_down.weight", c.n_ff, c.n_embd);
    } else {
      l.w_gate = ld.matrix(p + "ffn_gate.weight", c.n_embd, c.n_ff);
      l.w_up = ld.matrix(p + "ffn_up.weight", c.n_embd, c.n_ff);
      l.w_down = ld.matrix(p + "ffn_down.weight", c.n_ff, c.n_embd);
    }
    if (c.sandwich_norm) l.post_ffn_norm = ld.vector(p + "post_ffw_norm.weight", c.n_embd);
  }
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    MatrixScales& s = w.layers[il].scale;
    const bool delta = c.layers[il].kind == LayerKind::kDeltaNet;
    const bool fused = !delta && ld.has(p + "attn_qkv.weight");
    if (delta) {
      s.ssm_qkv = ld.scale_of(p + "attn_qkv.weight");
      s.ssm_z = ld.scale_of(p + "attn_gate.weight");
      s.ssm_beta = ld.scale_of(p + "ssm_beta.weight");
      s.ssm_alpha = ld.scale_of(p + "ssm_alpha.weight");
      s.ssm_out = ld.scale_of(p + "ssm_out.weight");
      if (c.ssm_grouped_heads) {
        // llama.cpp's qwen3next graph loads these layers' .scale tensors and never applies
        // them (its attention, expert and shared-expert scales it does apply); ridge computes
        // what llama.cpp computes. Real Qwen3-Next files carry none.
        s.ssm_qkv = s.ssm_z = s.ssm_out = 1.0f;
        w.layers[il].ssm_in_scale = w.layers[il].ssm_ba_scale = 1.0f;
      }
    } else if (fused) {
      s.wq = s.wk = s.wv = ld.scale_of(p + "attn_qkv.weight");
    } else {
      s.wq = ld.scale_of(p + "attn_q.weight");
      s.wk = ld.scale_of(p + "attn_k.weight");
      s.wv = ld.scale_of(p + "attn_v.weight");
    }
    if (!delta) s.wo = ld.scale_of(p + "attn_output.weight");
    if (c.n_expert == 0) {
      if (!c.fused_gate_up) s.w_gate = ld.scale_of(p + "ffn_gate.weight");
      s.w_up = ld.scale_of(p + "ffn_up.weight");
      s.w_down = ld.scale_of(p + "ffn_down.weight");
      if (c.fused_gate_up) s.w_gate = s.w_up;  // Phi-3's ffn_up holds both
    }
  }
  // MTP blocks (nextn_predict_layers) after the trunk: a draft head, not part of the model's
  // own forward pass.
  if (c.n_nextn_layers > 0) ld.skip_blocks_from(c.n_layer);
  ld.check_all_used(c.arch);
  return w;
}

}  // namespace ridge
