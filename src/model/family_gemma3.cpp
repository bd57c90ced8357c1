// Gemma 3: embeddings scaled by sqrt(n_embd), RMS norm on each q/k head, "sandwich" norms
// (after attention and MLP as well as before), GeGLU with tanh-GELU, tied output, and
// interleaved layers: five sliding-window layers (RoPE base 10000, no scaling) then one
// global layer (the file's RoPE base and linear scaling).
#include <cmath>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/families.h"

namespace ridge {

void configure_gemma3(const gguf::File& f, ModelConfig& c) {
  constexpr int kPattern = 6;             // layer il is global iff il % 6 == 5
  constexpr float kLocalRopeBase = 10000.0f;
  c.rope_mode = kernels::RopeMode::Neox;
  c.activation = Activation::kGelu;
  c.qk_norm = true;
  c.sandwich_norm = true;
  c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
  const int32_t window = sliding_window(f, "gemma3", /*required=*/true);
  for (int il = 0; il < c.n_layer; ++il) {
    if (il % kPattern == kPattern - 1) continue;  // global: keeps the file's base and scale
    c.layers[il] = LayerConfig{window, kLocalRopeBase, 1.0f};
  }
  c.final_softcap = static_cast<float>(f.get_f64("gemma3.final_logit_softcapping", 0.0));
  c.attn_softcap = static_cast<float>(f.get_f64("gemma3.attn_logit_softcapping", 0.0));
  // llama.cpp's rule (after gemma_pytorch's query_pre_attn_scalar): the 27B (62 layers)
  // scales q.k by (n_embd / n_head)^-0.5, every other size by d_head^-0.5. llama.cpp's saver
  // writes that value as gemma3.attention.scale; a file holding another one is refused.
  if (c.n_layer == 62) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head));
  check_implied_value(f, c.arch, "attention.scale", c.attn_scale);
}

}  // namespace ridge
