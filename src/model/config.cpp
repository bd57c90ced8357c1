#include "model/config.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/families.h"

namespace ridge {
namespace {

int32_t get_i32(const gguf::File& f, const std::string& key) {
  int64_t v = f.get_i64(key);
  if (v <= 0 || v > (int64_t{1} << 30))
    throw Error(str_cat(f.name(), ": metadata ", key, " = ", v, " is out of range"));
  return static_cast<int32_t>(v);
}

int32_t get_i32(const gguf::File& f, const std::string& key, int32_t fallback) {
  return f.has(key) ? get_i32(f, key) : fallback;
}

// Metadata that changes what a model computes. A family that does not read one of these
// refuses a file that sets it: running without it would be silently wrong. A key at a
// neutral value is not set: `neutral` is what absence means (0: no window, no cap, no
// experts, the family's own scale), which is also llama.cpp's default and so what its model
// saver writes for a model that does not use the key; `identity` another value that computes
// the same (1 for a factor). Not the soft caps: llama.cpp's defaults there are 50 and 30,
// real caps, so a family that does not cap still refuses them.
struct ComputationKey {
  std::string_view key;
  double neutral = 0;
  double identity = 0;
};
constexpr ComputationKey kComputationKeys[] = {
    {"attention.sliding_window"}, {"attn_logit_softcapping"}, {"final_logit_softcapping"}, {"expert_count"},
    {"expert_used_count"}, {"expert_shared_count"}, {"expert_weights_scale", 0, 1}, {"expert_weights_norm"},
    {"expert_gating_func"}, {"attention.scale"}, {"logit_scale", 0, 1}, {"embedding_scale", 0, 1},
    {"residual_scale", 0, 1}, {"attention.q_lora_rank"}, {"attention.kv_lora_rank"},
    {"rope.scaling.yarn_log_multiplier"}};

void refuse_unread_keys(const gguf::File& f, const std::string& arch, const FamilyTraits& family) {
  for (const ComputationKey& k : kComputationKeys) {
    if (!computation_key_set(f, arch, k.key)) continue;
    bool read = false;
    for (std::string_view r : family.reads) read = read || r == k.key;
    for (std::string_view r : family.ignores) read = read || r == k.key;
    if (!read)
      throw Error(str_cat(f.name(), ": ", arch, ".", k.key, " is set, and ridge's ", family.arch,
                          " model does not implement it; refusing to run without it"));
  }
}

}  // namespace

bool computation_key_set(const gguf::File& f, const std::string& arch, std::string_view key) {
  const gguf::Value* v = f.find(str_cat(arch, ".", key));
  if (v == nullptr) return false;
  for (const ComputationKey& k : kComputationKeys) {
    if (k.key != key) continue;
    if (!v->is_number() && v->type != gguf::ValueType::BOOL) return true;  // an array or a string
    const double x = v->type == gguf::ValueType::BOOL ? (v->as_bool() ? 1.0 : 0.0) : v->as_f64();
    return x != k.neutral && x != k.identity;
  }
  assert(!"computation_key_set: the key is not one of kComputationKeys");
  return true;
}

const char* pooling_name(Pooling pooling) {
  switch (pooling) {
    case Pooling::kNone: return "none";
    case Pooling::kMean: return "mean";
    case Pooling::kCls: return "cls";
    case Pooling::kLast: return "last";
    case Pooling::kRank: return "rank";
  }
  return "unknown";
}

bool ModelConfig::is_hybrid() const {
  for (const LayerConfig& l : layers)
    if (l.kind != LayerKind::kAttention) return true;
  return false;
}

int64_t ModelConfig::state_floats(int32_t il) const {
  switch (layers[static_cast<size_t>(il)].kind) {
    case LayerKind::kAttention: return 0;
    case LayerKind::kDeltaNet: {
      // The conv tail (d_conv - 1 inputs of q, k and v channels) and one d_v x d_k state per head.
      const int64_t conv_channels = 2 * int64_t{ssm_groups} * ssm_state + ssm_inner;
      return (ssm_conv_kernel - 1) * conv_channels + int64_t{ssm_inner} * ssm_state;
    }
  }
  return 0;
}

int64_t ModelConfig::state_tail_floats(int32_t il) const {
  if (layers[static_cast<size_t>(il)].kind == LayerKind::kAttention) return 0;
  return (ssm_conv_kernel - 1) * (2 * int64_t{ssm_groups} * ssm_state + ssm_inner);
}

const std::vector<std::string>& ModelConfig::supported_architectures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const FamilyTraits& f : families()) n.emplace_back(f.arch);
    return n;
  }();
  return names;
}

ModelConfig ModelConfig::from_gguf(const gguf::File& f) {
  ModelConfig c;
  c.arch = f.get_string("general.architecture");
  c.name = f.get_string("general.name", "");
  const FamilyTraits* family = find_family(c.arch);
  if (family == nullptr) {
    std::string known;
    for (const std::string& a : supported_architectures()) known += (known.empty() ? "" : ", ") + a;
    throw Error(str_cat(f.name(), ": architecture '", c.arch, "' is not supported (supported: ", known, ")"));
  }
  const std::string p = c.arch + ".";
  c.n_embd = get_i32(f, p + "embedding_length");
  c.n_layer = get_i32(f, p + "block_count");
  // Checked against the tensors before anything is sized by it: 2^30 blocks would
  // allocate gigabytes of per-layer configuration for a file that holds a few.
  int64_t blocks_present = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (t.name.rfind("blk.", 0) != 0) continue;
    const char* end = t.name.data() + t.name.size();
    int64_t index = 0;
    const auto [after, ec] = std::from_chars(t.name.data() + 4, end, index);
    if (ec == std::errc() && after != t.name.data() + 4 && (after == end || *after == '.'))
      blocks_present = std::max(blocks_present, index + 1);
  }
  if (c.n_layer > blocks_present) {
    // A file with no blocks at all is usually not a model (a vocabulary-only GGUF):
    // naming the first tensor a model needs says that better than the count does.
    if (blocks_present == 0) {
      f.tensor("token_embd.weight");
      throw Error(str_cat(f.name(), ": metadata ", p, "block_count = ", c.n_layer, " but the file has no blk.N tensors"));
    }
    throw Error(str_cat(f.name(), ": metadata ", p, "block_count = ", c.n_layer, " but the file has tensors for ",
                        blocks_present, " blocks (blk.0 ... blk.", blocks_present - 1, ")"));
  }
  c.n_ff = get_i32(f, p + "feed_forward_length");
  c.n_head = get_i32(f, p + "attention.head_count");
  c.n_kv_head = get_i32(f, p + "attention.head_count_kv", c.n_head);
  c.d_head = get_i32(f, p + "attention.key_length", c.n_embd / c.n_head);
  c.d_value = get_i32(f, p + "attention.value_length", c.d_head);
  c.n_ctx_train = get_i32(f, p + "context_length", 2048);
  c.norm_eps = static_cast<float>(f.get_f64(p + "attention.layer_norm_rms_epsilon", 1e-5));
  c.n_rot = get_i32(f, p + "rope.dimension_count", c.d_head);
  if (c.n_head % c.n_kv_head != 0)
    throw Error(str_cat(f.name(), ": ", p, "attention.head_count ", c.n_head,
                        " is not a multiple of head_count_kv ", c.n_kv_head));
  if (c.d_value != c.d_head)
    throw Error(str_cat(f.name(), ": key_length ", c.d_head, " != value_length ", c.d_value,
                        " is not supported"));
  if (c.n_rot > c.d_head || c.n_rot % 2 != 0)
    throw Error(str_cat(f.name(), ": ", p, "rope.dimension_count ", c.n_rot, " must be even and <= ", c.d_head));

  // llama.cpp's LLAMA_POOLING_TYPE_UNSPECIFIED (-1; its saver writes it as the u32 2^32 - 1)
  // says nothing: the same as no key. 0 (none) is a pooling of its own.
  const int64_t pooling = f.get_i64(p + "pooling_type", -1);
  if (pooling != -1 && pooling != int64_t{UINT32_MAX}) {
    if (pooling < 0 || pooling > static_cast<int64_t>(Pooling::kRank))
      throw Error(str_cat(f.name(), ": ", p, "pooling_type ", pooling, " is not one of llama.cpp's -1..4"));
    c.pooling = static_cast<Pooling>(pooling);
  }

  const gguf::TensorInfo& embd = f.tensor("token_embd.weight");
  c.n_vocab = static_cast<int32_t>(embd.ne[1]);

  float rope_base = static_cast<float>(f.get_f64(p + "rope.freq_base", 10000.0));
  float rope_scale = 1.0f;
  LayerConfig global{0, rope_base, 1.0f};
  // As llama.cpp reads them: the type defaults to linear; the factor is rope.scaling.factor,
  // else the older rope.scale_linear; none, or 0 (which llama.cpp's saver writes for an
  // unscaled model), is no scaling.
  std::string scaling = f.get_string(p + "rope.scaling.type", "linear");
  if (scaling == "linear" || scaling == "yarn") {
    const std::string factor_key = f.has(p + "rope.scaling.factor") ? "rope.scaling.factor" : "rope.scale_linear";
    double factor = f.get_f64(p + factor_key, 0.0);
    if (factor == 0) factor = 1;
    if (!(factor > 0)) throw Error(str_cat(f.name(), ": ", p, factor_key, " must be > 0"));
    rope_scale = static_cast<float>(1.0 / factor);
    global.rope_scale = rope_scale;
  } else if (scaling != "none") {
    throw Error(str_cat(f.name(), ": ", p, "rope.scaling.type '", scaling, "' is not supported (none, linear, yarn)"));
  }
  if (scaling == "yarn" && rope_scale != 1.0f) {
    // ggml's defaults; llama.cpp's converter writes the original context it needs.
    const int64_t n_ctx_orig = f.get_i64(p + "rope.scaling.original_context_length", 0);
    if (n_ctx_orig <= 0)
      throw Error(str_cat(f.name(), ": ", p, "rope.scaling.type is yarn but ", p,
                          "rope.scaling.original_context_length is missing"));
    const float beta_fast = static_cast<float>(f.get_f64(p + "rope.scaling.yarn_beta_fast", 32.0));
    const float beta_slow = static_cast<float>(f.get_f64(p + "rope.scaling.yarn_beta_slow", 1.0));
    float dims[2];
    kernels::yarn_corr_dims(c.n_rot, n_ctx_orig, rope_base, beta_fast, beta_slow, dims);
    global.yarn = true;
    global.yarn_low = dims[0];
    global.yarn_high = dims[1];
    global.rope_mscale = 1.0f + 0.1f * std::log(1.0f / rope_scale);
  }
  c.n_ctx_orig = get_i32(f, p + "rope.scaling.original_context_length", 0);
  const double attn_factor = f.get_f64(p + "rope.scaling.attn_factor", 1.0);
  refuse_unread_keys(f, c.arch, *family);
  bool reads_attn_factor = false;
  for (std::string_view r : family->reads) reads_attn_factor = reads_attn_factor || r == "rope.scaling.attn_factor";
  if (attn_factor != 1.0 && !reads_attn_factor)
    throw Error(str_cat(f.name(), ": ", p, "rope.scaling.attn_factor ", attn_factor, " is not supported (only 1)"));
  c.layers.assign(c.n_layer, global);
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.d_head));
  family->configure(f, c);
  return c;
}

std::string ModelConfig::summary() const {
  int n_windowed = 0;
  for (const LayerConfig& l : layers) n_windowed += l.window > 0;
  std::string s = str_cat(arch, ": ", n_layer, " layers, n_embd ", n_embd, ", ", n_head, " heads (",
                          n_kv_head, " kv) x ", d_head, ", ff ", n_ff, ", vocab ", n_vocab);
  if (n_windowed > 0) s += str_cat(", ", n_windowed, " sliding-window layers");
  if (n_expert > 0)
    s += str_cat(", ", n_expert, " experts (", n_expert_used, " per token) x ff ", n_ff_expert,
                 n_ff_shared > 0 ? str_cat(" + a shared expert x ff ", n_ff_shared) : std::string());
  return s;
}

}  // namespace ridge
