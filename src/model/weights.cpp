#include "model/weights.h"

#include <set>
#include <string>

#include "core/error.h"
#include "core/quant.h"
#include "gguf/gguf.h"

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
    kernels::check_weight_matrix(w, name);
    return w;
  }

  // A 1-D vector (norm weight, bias) as f32: the mapping itself when stored as f32.
  const float* vector(const std::string& name, int64_t n) {
    const gguf::TensorInfo& t = tensor(name, {n});
    if (t.dtype == DType::F32) return reinterpret_cast<const float*>(t.data);
    std::vector<float>& copy = owned_.emplace_back(static_cast<size_t>(n));
    dequantize_row(t.dtype, t.data, copy.data(), n);
    return copy.data();
  }

  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }

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

}  // namespace

ModelWeights ModelWeights::load(const gguf::File& f, const ModelConfig& c) {
  ModelWeights w;
  Loader ld(f, w.owned_);
  const int64_t q_dim = int64_t{c.n_head} * c.d_head;
  const int64_t kv_dim = int64_t{c.n_kv_head} * c.d_head;
  w.token_embd = ld.matrix("token_embd.weight", c.n_embd, c.n_vocab);
  w.output_norm = ld.vector("output_norm.weight", c.n_embd);
  w.output = ld.has("output.weight") ? ld.matrix("output.weight", c.n_embd, c.n_vocab) : w.token_embd;
  if (ld.has("rope_freqs.weight")) w.rope_freqs = ld.vector("rope_freqs.weight", c.n_rot / 2);
  w.layers.resize(c.n_layer);
  for (int il = 0; il < c.n_layer; ++il) {
    LayerWeights& l = w.layers[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    l.attn_norm = ld.vector(p + "attn_norm.weight", c.n_embd);
    l.wq = ld.matrix(p + "attn_q.weight", c.n_embd, q_dim);
    l.wk = ld.matrix(p + "attn_k.weight", c.n_embd, kv_dim);
    l.wv = ld.matrix(p + "attn_v.weight", c.n_embd, kv_dim);
    if (c.qkv_bias) {
      l.bq = ld.vector(p + "attn_q.bias", q_dim);
      l.bk = ld.vector(p + "attn_k.bias", kv_dim);
      l.bv = ld.vector(p + "attn_v.bias", kv_dim);
    }
    if (c.qk_norm) {
      l.q_norm = ld.vector(p + "attn_q_norm.weight", c.d_head);
      l.k_norm = ld.vector(p + "attn_k_norm.weight", c.d_head);
    }
    l.wo = ld.matrix(p + "attn_output.weight", q_dim, c.n_embd);
    if (c.sandwich_norm) l.post_attn_norm = ld.vector(p + "post_attention_norm.weight", c.n_embd);
    l.ffn_norm = ld.vector(p + "ffn_norm.weight", c.n_embd);
    l.w_gate = ld.matrix(p + "ffn_gate.weight", c.n_embd, c.n_ff);
    l.w_up = ld.matrix(p + "ffn_up.weight", c.n_embd, c.n_ff);
    l.w_down = ld.matrix(p + "ffn_down.weight", c.n_ff, c.n_embd);
    if (c.sandwich_norm) l.post_ffn_norm = ld.vector(p + "post_ffw_norm.weight", c.n_embd);
  }
  ld.check_all_used(c.arch);
  return w;
}

}  // namespace ridge
