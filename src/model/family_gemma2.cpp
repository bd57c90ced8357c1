// Gemma 2: embeddings scaled by sqrt(n_embd), "sandwich" norms, GeGLU with tanh-GELU, tied
// output, soft-capping of the attention logits and of the final logits, and layers that
// alternate a sliding window (even layers, as llama.cpp's pattern of 2) with global
// attention, all with the file's RoPE. No q/k norms.
#include <cmath>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/families.h"

namespace ridge {

void configure_gemma2(const gguf::File& f, ModelConfig& c) {
  c.rope_mode = kernels::RopeMode::Neox;
  c.activation = Activation::kGelu;
  c.sandwich_norm = true;
  c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
  const int32_t window = sliding_window(f, "gemma2", /*required=*/true);
  for (int il = 0; il < c.n_layer; il += 2) c.layers[il].window = window;
  c.final_softcap = static_cast<float>(f.get_f64("gemma2.final_logit_softcapping", 0.0));
  c.attn_softcap = static_cast<float>(f.get_f64("gemma2.attn_logit_softcapping", 0.0));
}

}  // namespace ridge
