// Qwen 3.5 (qwen35): a hybrid of gated-DeltaNet layers and full attention layers, three
// to one (full_attention_interval 4: layers 3, 7, 11, ... attend). The attention layers are
// Qwen3's with an output gate (attn_q holds q and a gate per head; the attention output is
// multiplied by sigmoid(gate)) and partial rotary dims; the DeltaNet layers are described in
// kernels/recurrent/recurrent.h and Model::delta_net_layer. Both store the norm before the
// MLP as post_attention_norm. The text model's multi-axis RoPE (rope.dimension_sections)
// gives text tokens the same position on every axis, which is NeoX RoPE, as long as every
// rotary pair falls in one of the first three sections; a file where one does not is refused.
// Qwen 3.5-MoE (qwen35moe): the same trunk with a mixture of experts in every layer's MLP
// (softmax router, top k renormalised) and a shared expert gated by sigmoid(ffn_gate_inp_shexp . x).
// Qwen3-Next (qwen3next) is that model before the 3.5 converter: its value heads stay grouped
// by key head (head h reads key head h / (heads / groups)), beta and alpha come in one ssm_ba
// ([b x r, a x r] per key head) and older files hold q, k, v and z in one ssm_in ([q k v z]
// per key head) instead of attn_qkv and attn_gate; plain NeoX RoPE.
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/families.h"

namespace ridge {
namespace {

int32_t positive_i32(const gguf::File& f, const std::string& key) {
  const int64_t v = f.get_i64(key);
  if (v < 1 || v > (int64_t{1} << 24)) throw Error(str_cat(f.name(), ": ", key, " is ", v, "; it must be positive"));
  return static_cast<int32_t>(v);
}

// Which of the trunk's layers are recurrent: attention.recurrent_layers (one flag per block)
// where the file has it, else every layer but each full_attention_interval-th (default 4).
std::vector<bool> recurrent_layers(const gguf::File& f, const std::string& p, int32_t n_layer, int32_t n_all) {
  std::vector<bool> recurrent(static_cast<size_t>(n_layer));
  if (const gguf::Value* v = f.find(p + "attention.recurrent_layers")) {
    if (v->type != gguf::ValueType::ARRAY || static_cast<int64_t>(v->as_array().size()) != n_all)
      throw Error(str_cat(f.name(), ": ", p, "attention.recurrent_layers must be an array of ", n_all, " flags"));
    const gguf::Array& flags = v->as_array();
    for (int32_t il = 0; il < n_layer; ++il) {
      const gguf::Value e = flags.at(static_cast<size_t>(il));
      recurrent[static_cast<size_t>(il)] = e.type == gguf::ValueType::BOOL ? e.as_bool() : e.as_i64() != 0;
    }
    return recurrent;
  }
  const int64_t interval = f.get_i64(p + "full_attention_interval", 4);
  if (interval < 1)
    throw Error(str_cat(f.name(), ": ", p, "full_attention_interval is ", interval, "; it must be positive"));
  for (int32_t il = 0; il < n_layer; ++il) recurrent[static_cast<size_t>(il)] = (il + 1) % interval != 0;
  return recurrent;
}

// Text positions are the same on the first three axes of multi-axis RoPE and 0 on the
// fourth; pair i takes axis (i % 3) within 3 * sections[axis] pairs (interleaved, as
// Qwen3-VL lays them out), else the fourth. NeoX only if no pair lands on the fourth.
void check_rope_sections(const gguf::File& f, const std::string& p, int32_t n_rot) {
  const gguf::Value* v = f.find(p + "rope.dimension_sections");
  if (v == nullptr) return;
  if (v->type != gguf::ValueType::ARRAY || v->as_array().size() < 3)
    throw Error(str_cat(f.name(), ": ", p, "rope.dimension_sections must be an array of 4 section sizes"));
  const gguf::Array& a = v->as_array();
  int64_t sections[4] = {0, 0, 0, 0};
  int64_t total = 0;
  for (size_t i = 0; i < 4 && i < a.size(); ++i) total += sections[i] = a.at(i).as_i64();
  if (total <= 0) throw Error(str_cat(f.name(), ": ", p, "rope.dimension_sections sum to ", total));
  for (int64_t pair = 0; pair < n_rot / 2; ++pair) {
    const int64_t sector = pair % total;
    const int64_t axis = sector % 3;
    if (sector >= 3 * sections[axis])
      throw Error(str_cat(f.name(), ": ", p, "rope.dimension_sections puts rotary pair ", pair,
                          " on the fourth axis, which text tokens leave unrotated; ridge's qwen35 model "
                          "computes plain NeoX RoPE and refuses this layout"));
  }
}

}  // namespace

void configure_qwen35(const gguf::File& f, ModelConfig& c) {
  const std::string p = c.arch + ".";
  c.rope_mode = kernels::RopeMode::Neox;
  c.activation = Activation::kSilu;
  c.qk_norm = true;
  c.attn_output_gate = true;
  c.post_attn_ffn_norm = true;
  c.ssm_conv_kernel = positive_i32(f, p + "ssm.conv_kernel");
  c.ssm_inner = positive_i32(f, p + "ssm.inner_size");
  c.ssm_state = positive_i32(f, p + "ssm.state_size");
  c.ssm_heads = positive_i32(f, p + "ssm.time_step_rank");
  c.ssm_groups = positive_i32(f, p + "ssm.group_count");
  if (c.ssm_inner % c.ssm_heads != 0 || c.ssm_heads % c.ssm_groups != 0)
    throw Error(str_cat(f.name(), ": ", p, "ssm.inner_size ", c.ssm_inner, " must split into ssm.time_step_rank ",
                        c.ssm_heads, " value heads, a multiple of ssm.group_count ", c.ssm_groups));
  if (c.ssm_inner / c.ssm_heads != c.ssm_state)
    throw Error(str_cat(f.name(), ": ", p, "value head size ", c.ssm_inner / c.ssm_heads, " (ssm.inner_size / ",
                        "ssm.time_step_rank) differs from the key head size ssm.state_size ", c.ssm_state,
                        "; llama.cpp's gated DeltaNet needs them equal, and so does ridge's"));
  // block_count counts the MTP blocks too: the trunk is the first n_layer - nextn blocks.
  const int64_t nextn = f.get_i64(p + "nextn_predict_layers", 0);
  if (nextn < 0 || nextn >= c.n_layer)
    throw Error(str_cat(f.name(), ": ", p, "nextn_predict_layers ", nextn, " is outside 0..", c.n_layer - 1));
  const int32_t n_all = c.n_layer;
  c.n_nextn_layers = static_cast<int32_t>(nextn);
  c.n_layer -= c.n_nextn_layers;
  c.layers.resize(static_cast<size_t>(c.n_layer));
  const std::vector<bool> recurrent = recurrent_layers(f, p, c.n_layer, n_all);
  bool any_attention = false;
  for (int32_t il = 0; il < c.n_layer; ++il) {
    c.layers[static_cast<size_t>(il)].kind = recurrent[static_cast<size_t>(il)] ? LayerKind::kDeltaNet
                                                                                : LayerKind::kAttention;
    any_attention = any_attention || !recurrent[static_cast<size_t>(il)];
  }
  if (!any_attention)
    throw Error(str_cat(f.name(), ": every one of the ", c.n_layer, " layers is recurrent; ridge needs at least one ",
                        "attention layer (", p, "full_attention_interval)"));
  // Qwen3-Next's graph applies plain NeoX RoPE whatever rope.dimension_sections says.
  if (c.arch != "qwen3next") check_rope_sections(f, p, c.n_rot);
}

void configure_qwen35moe(const gguf::File& f, ModelConfig& c) {
  configure_qwen35(f, c);
  const std::string p = c.arch + ".";
  if (c.arch == "qwen3next") c.ssm_grouped_heads = true;
  if (!computation_key_set(f, c.arch, "expert_count")) throw Error(str_cat(f.name(), ": ", p, "expert_count is missing"));
  configure_experts(f, c, /*norm=*/true);
  // llama.cpp's widths when the keys are absent: n_ff / n_expert_used per expert, n_ff shared.
  if (f.get_u64(p + "expert_feed_forward_length", 0) == 0) c.n_ff_expert = c.n_ff / c.n_expert_used;
  const uint64_t shared = f.get_u64(p + "expert_shared_feed_forward_length", 0);
  c.n_ff_shared = shared > 0 ? static_cast<int32_t>(shared) : c.n_ff;
  if (c.n_ff_expert < 1 || c.n_ff_shared < 1)
    throw Error(str_cat(f.name(), ": ", p, "expert widths ", c.n_ff_expert, " and ", c.n_ff_shared, " (shared) must be positive"));
}

}  // namespace ridge
