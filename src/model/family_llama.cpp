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
  int64_t window = f.get_i64(c.arch + ".attention.sliding_window", 0);
  for (LayerConfig& l : c.layers) l.window = static_cast<int32_t>(window);
  configure_experts(f, c, /*norm=*/true);
}

}  // namespace ridge
