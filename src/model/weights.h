// The model's tensors as zero-copy views into the GGUF mapping, checked against the
// config: every tensor the architecture needs is present with the expected shape and a
// type the kernels can read. Small float vectors (norms, biases) are converted to f32
// once at load.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/gemm/gemm.h"
#include "model/config.h"

namespace ridge {

// One expert of a mixture-of-experts layer: views into the layer's 3-D expert tensors.
struct ExpertWeights {
  kernels::WeightMatrix w_gate;  // [n_ff_expert][n_embd]
  kernels::WeightMatrix w_up;    // [n_ff_expert][n_embd]
  kernels::WeightMatrix w_down;  // [n_embd][n_ff_expert]
};

struct LayerWeights {
  const float* attn_norm = nullptr;       // [n_embd]
  kernels::WeightMatrix wq;               // [n_head * d_head][n_embd]
  kernels::WeightMatrix wk;               // [n_kv_head * d_head][n_embd]
  kernels::WeightMatrix wv;               // [n_kv_head * d_head][n_embd]
  const float* bq = nullptr;              // [n_head * d_head]     (qkv_bias)
  const float* bk = nullptr;              // [n_kv_head * d_head]  (qkv_bias)
  const float* bv = nullptr;              // [n_kv_head * d_head]  (qkv_bias)
  const float* q_norm = nullptr;          // [d_head] (qk_norm), [n_head * d_head] (qk_norm_full)
  const float* k_norm = nullptr;          // [d_head] (qk_norm), [n_kv_head * d_head] (qk_norm_full)
  kernels::WeightMatrix wo;               // [n_embd][n_head * d_head]
  const float* post_attn_norm = nullptr;  // [n_embd]              (sandwich_norm)
  const float* ffn_norm = nullptr;        // [n_embd]
  kernels::WeightMatrix w_gate;           // [n_ff][n_embd]
  kernels::WeightMatrix w_up;             // [n_ff][n_embd]
  kernels::WeightMatrix w_down;           // [n_embd][n_ff]
  const float* post_ffn_norm = nullptr;   // [n_embd]              (sandwich_norm)
  // Mixture of experts (n_expert > 0) instead of w_gate/w_up/w_down:
  kernels::WeightMatrix gate_inp;         // [n_expert][n_embd] router
  std::vector<ExpertWeights> experts;     // [n_expert]
};

struct ModelWeights {
  kernels::WeightMatrix token_embd;  // [n_vocab][n_embd]
  const float* output_norm = nullptr;  // [n_embd]
  kernels::WeightMatrix output;      // [n_vocab][n_embd]; token_embd when tied
  const float* rope_freqs = nullptr; // [n_rot / 2] Llama 3.x frequency divisors, when present
  const float* rope_factors_long = nullptr;   // [n_rot / 2] Phi-3 LongRoPE divisors past the
  const float* rope_factors_short = nullptr;  // original context, and within it
  std::vector<LayerWeights> layers;  // [n_layer]

  // Throws ridge::Error naming the tensor: missing, wrong shape, a type the kernels cannot
  // read, or present in the file but used by nothing (an unsupported variant would
  // otherwise run silently without it).
  static ModelWeights load(const gguf::File& file, const ModelConfig& config);

 private:
  std::vector<std::vector<float>> owned_;  // f32 copies of non-f32 norm/bias vectors
};

}  // namespace ridge
