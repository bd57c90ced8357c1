// Model hyper-parameters and architecture traits, read from GGUF metadata. An
// architecture is data: which norms, biases, activation and RoPE layout it uses, and
// per-layer attention windows and RoPE bases. The forward pass reads only this struct.
//
//   gguf::File f = gguf::File::open(path);
//   ModelConfig c = ModelConfig::from_gguf(f);   // throws for unsupported architectures
//   c.layers[il].window;                         // 0 = global attention
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops/ops.h"

namespace ridge::gguf {
class File;
}

namespace ridge {

enum class Activation { kSilu, kGelu };  // gate activation of the gated MLP

// What a layer's token mixer is: attention over the K/V cache, or a hybrid model's
// recurrent layer over a fixed-size state (kv/kv_cache.h, "Recurrent state").
enum class LayerKind {
  kAttention,
  kDeltaNet,  // Qwen3-Next / Qwen 3.5 gated DeltaNet (kernels/recurrent/recurrent.h)
};

// How an embedding pools the final hidden states of an input's tokens: llama.cpp's
// enum llama_pooling_type, in its numbering (GGUF's <arch>.pooling_type).
enum class Pooling { kNone = 0, kMean = 1, kCls = 2, kLast = 3, kRank = 4 };
const char* pooling_name(Pooling pooling);  // "none", "mean", "cls", "last", "rank"

struct LayerConfig {
  int32_t window = 0;        // sliding window in tokens; 0 = global attention
  float rope_base = 10000.0f;
  float rope_scale = 1.0f;   // freq_scale = 1 / linear scaling factor
  // YaRN (rope.scaling.type yarn): kernels::RopeParams' ramp and attention factor.
  bool yarn = false;
  float yarn_low = 0.0f, yarn_high = 0.0f;
  float rope_mscale = 1.0f;
  LayerKind kind = LayerKind::kAttention;
};

struct ModelConfig {
  std::string arch;          // general.architecture
  std::string name;          // general.name
  int32_t n_vocab = 0;
  int32_t n_embd = 0;
  int32_t n_layer = 0;
  int32_t n_head = 0;
  int32_t n_kv_head = 0;
  int32_t d_head = 0;        // key_length (per head)
  int32_t d_value = 0;       // value_length (per head)
  int32_t n_ff = 0;
  int32_t n_ctx_train = 0;
  int32_t n_ctx_orig = 0;    // rope.scaling.original_context_length (0: none)
  float norm_eps = 1e-5f;

  kernels::RopeMode rope_mode = kernels::RopeMode::Norm;
  int32_t n_rot = 0;
  std::vector<LayerConfig> layers;  // [n_layer]

  float attn_scale = 1.0f;       // multiplies q.k
  float embd_scale = 1.0f;       // multiplies the token embedding (Gemma: sqrt(n_embd))
  float attn_softcap = 0.0f;     // 0 = none
  float final_softcap = 0.0f;    // 0 = none
  bool qkv_bias = false;         // Qwen2
  bool qk_norm = false;          // Qwen3, Gemma 3: RMS norm of each q/k head
  bool qk_norm_full = false;     // OLMoE: RMS norm over all of q and of k instead
  bool sandwich_norm = false;    // Gemma 2/3: norms after attention and MLP too
  bool fused_qkv = false;        // Phi-3: q/k/v may be one attn_qkv tensor (q rows, then k, then v)
  bool fused_gate_up = false;    // Phi-3: ffn_up holds the gate rows, then the up rows
  Activation activation = Activation::kSilu;
  Pooling pooling = Pooling::kMean;  // <arch>.pooling_type; absent: mean (llama.cpp's default
                                     // for a model that does not say)

  // Mixture of experts (n_expert > 0): each token's MLP is the weighted sum of the
  // n_expert_used experts its router ranks highest (softmax over all experts, top k;
  // renormalised to sum 1 when expert_weights_norm).
  int32_t n_expert = 0;
  int32_t n_expert_used = 0;
  int32_t n_ff_expert = 0;       // each expert's feed-forward width
  bool expert_weights_norm = false;
  // A shared expert every token runs beside its chosen ones (Qwen 3.5-MoE), its output
  // scaled by sigmoid(ffn_gate_inp_shexp . x): its width, 0 for none.
  int32_t n_ff_shared = 0;

  // Hybrid models (layers[il].kind != kAttention), from <arch>.ssm.*:
  int32_t ssm_conv_kernel = 0;   // conv_kernel: taps of the causal conv before the recurrence
  int32_t ssm_inner = 0;         // inner_size: value channels (gated DeltaNet: n_v_heads * d_v)
  int32_t ssm_state = 0;         // state_size: the key head size of a DeltaNet head
  int32_t ssm_heads = 0;         // time_step_rank: value heads
  bool ssm_grouped_heads = false;  // Qwen3-Next: value head h reads key head h / (heads / groups)
                                   // (Qwen 3.5's converter tiles them: h % groups)
  int32_t ssm_groups = 0;        // group_count: key/query heads
  bool attn_output_gate = false; // Qwen3-Next / 3.5 attention layers: attn_q holds q and a
                                 // gate per head; the output is attention * sigmoid(gate)
  bool post_attn_ffn_norm = false;  // the pre-MLP norm is stored as post_attention_norm
  int32_t n_nextn_layers = 0;    // nextn_predict_layers: MTP blocks after the n_layer trunk
                                 // (blk.n_layer ...); loaded, not run
  bool is_hybrid() const;
  // Floats of recurrent state layer il keeps per sequence (0 for attention layers), and of
  // those the conv tail, stored last: a DeltaNet layer's state is [n_v][d_v][d_k], then the
  // tail [conv_kernel - 1][conv channels].
  int64_t state_floats(int32_t il) const;
  int64_t state_tail_floats(int32_t il) const;

  static ModelConfig from_gguf(const gguf::File& file);
  static const std::vector<std::string>& supported_architectures();
  // One line: "gemma3: 18 layers, n_embd 640, 4 heads (1 kv) x 256, ff 2048, vocab 262144"
  std::string summary() const;
};

}  // namespace ridge
