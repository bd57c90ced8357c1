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
  // llama.cpp's rule (after gemma_pytorch's query_pre_attn_scalar): the 27B (46 layers)
  // scales q.k by (n_embd / n_head)^-0.5, every other size by d_head^-0.5. llama.cpp's saver
  // writes that value as gemma2.attention.scale; a file holding another one is refused.
  if (c.n_layer == 46) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head));
  check_implied_value(f, c.arch, "attention.scale", c.attn_scale);
}

}  // namespace ridge
