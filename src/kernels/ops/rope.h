// Rotary position embedding in both ggml layouts, applied in place to q or k rows:
//   Norm: rotates adjacent pairs (x[2i], x[2i+1])           (llama, llama2.c)
//   Neox: rotates (x[i], x[i + n_rot/2])                      (Qwen2, Gemma 3, GPT-NeoX)
// by theta_i = pos * freq_scale * freq_base^(-2i / n_rot) / freq_factors[i], i < n_rot / 2;
// dims >= n_rot pass through. freq_scale = 1 / factor is linear RoPE scaling (Gemma 3
// global layers); freq_factors is Llama 3.x's "llama3" scaling, stored per pair in the
// GGUF as rope_freqs.weight (long wavelengths stretched, short ones kept).
// YaRN (Peng et al. 2023, as ggml computes it): pair i's frequency is interpolated by
// freq_scale above pair yarn_high, kept below yarn_low, with a linear ramp between:
//   theta_i = pos * base^(-2i/n_rot) * (freq_scale * (1 - r_i) + r_i),
//   r_i = 1 - clamp((i - yarn_low) / max(0.001, yarn_high - yarn_low), 0, 1),
// and cos and sin are multiplied by mscale (0.1 ln(factor) + 1: attention temperature).
//
//   RopeParams p{RopeMode::Neox, d_head, 1e6f, 1.0f};
//   rope(q, pos, n_tokens, n_head, d_head, p);    // q: [n_tokens][n_head][d_head]
#pragma once

#include <cstddef>
#include <cstdint>

namespace ridge::kernels {

enum class RopeMode { Norm, Neox };

struct RopeParams {
  RopeMode mode = RopeMode::Norm;
  int64_t n_rot = 0;          // rotary dims per head: even, <= d_head, <= kMaxRopeDims
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;    // 1 / linear scaling factor
  const float* freq_factors = nullptr;  // [n_rot / 2] divisors of each pair's frequency, or null
  bool yarn = false;          // YaRN ramp between yarn_low and yarn_high (pair indices)
  float yarn_low = 0.0f;
  float yarn_high = 0.0f;
  float mscale = 1.0f;        // multiplies cos and sin

  bool operator==(const RopeParams&) const = default;
};

// YaRN's ramp bounds as ggml derives them: the pair indices whose wavelength turns
// beta_fast and beta_slow times over the original context, floored/ceiled and clamped
// to [0, n_rot - 1]. Writes {low, high}.
void yarn_corr_dims(int64_t n_rot, int64_t n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
                    float dims[2]);

constexpr int64_t kMaxRopeDims = 1024;

// Rotates every head of every token in place. Angles are computed in double, so large
// positions keep their precision. Throws ridge::Error for an odd or out-of-range n_rot.
//   x: [n_tokens][token_stride], head h of token t at x + t * token_stride + h * d_head
//   pos: [n_tokens] absolute positions       token_stride 0 means n_head * d_head
void rope(float* x, const int32_t* pos, int64_t n_tokens, int64_t n_head, int64_t d_head,
          const RopeParams& params, int64_t token_stride = 0);

// The same rotation in two steps, so one step's angles serve q and k of every layer that
// shares the params: rope_table computes cos and sin of every pair for each token, and
// rope_apply rotates with them. rope_table + rope_apply gives rope's bits.
//   table: [n_tokens][2][n_rot / 2], each token's cosines then its sines
size_t rope_table_floats(int64_t n_tokens, const RopeParams& params);
void rope_table(const int32_t* pos, int64_t n_tokens, const RopeParams& params, float* table);
void rope_apply(float* x, const float* table, int64_t n_tokens, int64_t n_head, int64_t d_head,
                const RopeParams& params, int64_t token_stride = 0);

// Reference for tests: the direct formula per element, in double.
void rope_reference(float* x, const int32_t* pos, int64_t n_tokens, int64_t n_head, int64_t d_head,
                    const RopeParams& params, int64_t token_stride = 0);

}  // namespace ridge::kernels
