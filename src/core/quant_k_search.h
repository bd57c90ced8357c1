// Scale searches shared by the K-quant reference quantizers (internal to core/quant_k*.cpp):
// for a small group of values, choose a scale (and for the asymmetric formats a min) and
// integer codes, as ggml's reference quantizers do, so that our bytes match theirs.
//
//   int8_t codes[16];
//   float scale = fit_symmetric_scale(16, 32, x, codes);   // codes in 0..63, x ~ scale*(c-32)
#pragma once

#include <bit>
#include <cstdint>

namespace ridge::quant_k {

// Below this largest magnitude a group counts as all zero.
constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even, for |v| <= 2^22: adding 1.5 * 2^23 leaves the rounded
// integer in the low mantissa bits. Used instead of lrintf because out-of-range inputs
// must behave as in ggml (wrap, not saturate) for the bytes to match.
inline int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  return static_cast<int>(std::bit_cast<uint32_t>(shifted) & 0x007fffffu) - 0x00400000;
}

// Symmetric codes in 0..2*nmax-1 (value ~ scale * (code - nmax)), weighted by x^2, trying
// 19 scales around nmax / max|x|; returns the least-squares scale. (ggml: make_qx_quants
// with rmse_type 1 and no importance weights.)
float fit_symmetric_scale(int n, int nmax, const float* x, int8_t* codes);

// As above for Q3_K: start from nmax / max|x|, then improve codes one at a time for up to
// five passes while the weighted fit improves. (ggml: make_q3_quants with do_rmse.)
float fit_symmetric_scale_q3(int n, int nmax, const float* x, int8_t* codes);

// Asymmetric codes in 0..nmax (value ~ scale * code - *neg_min, *neg_min >= 0), weighted
// by `weights`, trying nstep+1 scales (nmax + rmin + rdelta*i) / (max - min) and keeping
// the one with the least weighted squared (or, with use_abs_error, absolute) error.
// `scratch` holds n codes. (ggml: make_qkx2_quants.)
float fit_scale_and_min(int n, int nmax, const float* x, const float* weights,
                        uint8_t* codes, float* neg_min, uint8_t* scratch, float rmin,
                        float rdelta, int nstep, bool use_abs_error);

}  // namespace ridge::quant_k
