// OLMoE (AllenAI): Llama-like with NeoX-layout RoPE, an RMS norm over the whole q and k
// vectors (not per head) after their projections, and a mixture of experts in every layer
// whose top-k weights are the softmax probabilities as they are (not renormalised).
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/families.h"

namespace ridge {

void configure_olmoe(const gguf::File& f, ModelConfig& c) {
  c.rope_mode = kernels::RopeMode::Neox;
  c.activation = Activation::kSilu;
  c.qk_norm_full = true;
  configure_experts(f, c, /*norm=*/false);
  if (c.n_expert == 0) throw Error(str_cat(f.name(), ": olmoe.expert_count is missing"));
}

}  // namespace ridge
