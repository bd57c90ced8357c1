// Qwen2/Qwen2.5 (biases on Q, K and V) and Qwen3 (RMS norm on each q/k head instead):
// otherwise Llama-like, with NeoX-layout RoPE. Qwen3-MoE: Qwen3 with a mixture of experts
// in every layer (expert_feed_forward_length wide, top-k weights renormalised:
// norm_topk_prob).
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/families.h"

namespace ridge {

void configure_qwen2(const gguf::File& f, ModelConfig& c) {
  c.rope_mode = kernels::RopeMode::Neox;
  c.activation = Activation::kSilu;
  c.qkv_bias = true;
}

void configure_qwen3(const gguf::File& f, ModelConfig& c) {
  c.rope_mode = kernels::RopeMode::Neox;
  c.activation = Activation::kSilu;
  c.qk_norm = true;
}

void configure_qwen3moe(const gguf::File& f, ModelConfig& c) {
  configure_qwen3(f, c);
  configure_experts(f, c, /*norm=*/true);
  if (c.n_expert == 0) throw Error(str_cat(f.name(), ": qwen3moe.expert_count is missing"));
}

}  // namespace ridge
