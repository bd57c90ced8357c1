// Llama 2/3, TinyLlama, SmolLM, llama2.c conversions, and Mistral: RMS norm, SwiGLU,
// adjacent-pair RoPE (the GGUF converter permutes Q/K into that layout), no biases.
// Mistral-style models add a sliding window on every layer; Mixtral (converted as llama
// with expert tensors) a mixture of experts, top-k weights renormalised.
#include "gguf/gguf.h"
#include "model/families.h"

namespace ridge {

void configure_llama(const gguf::File& f, ModelConfig& c) {
  c.rope_mode = kernels::RopeMode::Norm;
  c.activation = Activation::kSilu;
  const int32_t window = sliding_window(f, c.arch, /*required=*/false);
  for (LayerConfig& l : c.layers) l.window = window;
  configure_experts(f, c, /*norm=*/true);
}

}  // namespace ridge
