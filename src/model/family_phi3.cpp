// Phi-3 / Phi-3.5 (Microsoft): Llama-like with NeoX-layout RoPE, q/k/v fused in one
// attn_qkv tensor (or three attn_q/k/v, as llama.cpp's random-weight saver writes them and
// llama.cpp loads too) and the gate and up projections in one ffn_up tensor (gate rows
// first), both read as zero-copy row ranges. attention.sliding_window (2047 on the 4k models,
// 262144 on Phi-3.5) applies to every layer, as in Hugging Face's definition of the model
// (llama.cpp has disabled Phi's window, so past 2047 tokens the two engines differ). LongRoPE (the 128k models): per-pair frequency divisors,
// rope_factors_long.weight when the model runs with a context past
// rope.scaling.original_context_length (ModelOptions::n_ctx, as llama.cpp decides by its
// -c), rope_factors_short.weight otherwise, and cos and sin multiplied by
// rope.scaling.attn_factor in either case.
#include "gguf/gguf.h"
#include "model/families.h"

namespace ridge {

void configure_phi3(const gguf::File& f, ModelConfig& c) {
  c.rope_mode = kernels::RopeMode::Neox;
  c.activation = Activation::kSilu;
  c.fused_qkv = true;
  c.fused_gate_up = true;
  const int32_t window = sliding_window(f, "phi3", /*required=*/false);
  for (LayerConfig& l : c.layers) l.window = window;
  const float attn_factor = static_cast<float>(f.get_f64("phi3.rope.scaling.attn_factor", 1.0));
  for (LayerConfig& l : c.layers) l.rope_mscale = attn_factor;
}

}  // namespace ridge
