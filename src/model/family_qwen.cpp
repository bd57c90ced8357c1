// Qwen2/Qwen2.5 (biases on Q, K and V) and Qwen3 (RMS norm on each q/k head instead):
// otherwise Llama-like, with NeoX-layout RoPE.
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

}  // namespace ridge
