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
  // llama.cpp's per-expert output scales (<stem>.scale {n_expert}; 1 where the file has none).
  float gate_scale = 1.0f, up_scale = 1.0f, down_scale = 1.0f;
};

// llama.cpp's per-tensor output scales: <matrix>.scale ({1} f32), y = (W x) * scale, which its
// model saver writes for every matrix and NVFP4 conversions carry; 1 where a file has none.
// (<matrix>.input_scale, which llama.cpp loads and never applies, is accepted and ignored.)
struct MatrixScales {
  float wq = 1, wk = 1, wv = 1, wo = 1, w_gate = 1, w_up = 1, w_down = 1;
  float ssm_qkv = 1, ssm_z = 1, ssm_beta = 1, ssm_alpha = 1, ssm_out = 1;
};

// y[0 .. n) *= s, for a matrix's output scale (nothing when it is 1).
void apply_scale(float* y, int64_t n, float s);

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
  // Gated DeltaNet (LayerKind::kDeltaNet) instead of wq..wo; key_dim = ssm_groups * ssm_state,
  // value_dim = ssm_inner, conv channels = 2 * key_dim + value_dim (q, k, v in that order):
  kernels::WeightMatrix ssm_qkv;          // attn_qkv  [conv channels][n_embd]
  kernels::WeightMatrix ssm_z;            // attn_gate [value_dim][n_embd]: the output gate z
  kernels::WeightMatrix ssm_beta;         // [ssm_heads][n_embd]: beta = sigmoid(this x)
  kernels::WeightMatrix ssm_alpha;        // [ssm_heads][n_embd]: g = softplus(this x + dt) * a
  // Qwen3-Next: beta and alpha rows in one ssm_ba, per key head [r betas, r alphas] (r value
  // heads per key head); older files: ssm_in, per key head [q k v z] rows, for ssm_qkv and ssm_z.
  kernels::WeightMatrix ssm_ba;           // [2 ssm_heads][n_embd]
  kernels::WeightMatrix ssm_in;           // [conv channels + value_dim][n_embd]
  float ssm_ba_scale = 1.0f, ssm_in_scale = 1.0f;
  const float* ssm_conv = nullptr;        // ssm_conv1d [conv channels][ssm_conv_kernel]
  const float* ssm_dt = nullptr;          // ssm_dt.bias [ssm_heads]
  const float* ssm_a = nullptr;           // ssm_a [ssm_heads]: -exp(A_log)
  const float* ssm_norm = nullptr;        // [ssm_inner / ssm_heads]: the gated norm of each head
  kernels::WeightMatrix ssm_out;          // [n_embd][value_dim]
  MatrixScales scale;
  // Mixture of experts (n_expert > 0) instead of w_gate/w_up/w_down:
  kernels::WeightMatrix gate_inp;         // [n_expert][n_embd] router
  std::vector<ExpertWeights> experts;     // [n_expert]
  ExpertWeights shared;                   // n_ff_shared > 0: [n_ff_shared] wide
  const float* shared_gate = nullptr;     // [n_embd] ffn_gate_inp_shexp
};

struct ModelWeights {
  kernels::WeightMatrix token_embd;  // [n_vocab][n_embd]
  const float* output_norm = nullptr;  // [n_embd]
  kernels::WeightMatrix output;      // [n_vocab][n_embd]; token_embd when tied
  float output_scale = 1.0f;         // output.scale (MatrixScales)
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
