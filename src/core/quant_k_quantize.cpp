// Reference quantizers of the K-quant formats (Q2_K..Q6_K and the Q8_K activation
// format), following ggml's quantize_row_*_ref: fit each group's scale (and min), quantize
// the group scales against a super-block scale stored as f16, then re-round every value
// against the scales actually stored, so the codes fit what a reader will reconstruct.
// Q4_K, Q5_K and Q6_K also have importance-weighted variants (core/quant_weighted.h,
// ggml's quantize_row_*_impl), which differ only in how they fit scales.
#include "core/quant_exact_fp.h"  // first: no FMA contraction in this file

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/quant_k_search.h"
#include "core/quant_weighted.h"

namespace ridge {

using quant_k::fit_positive_scale;
using quant_k::fit_scale_and_min;
using quant_k::fit_symmetric_scale;
using quant_k::fit_symmetric_scale_q3;
using quant_k::fit_symmetric_scale_weighted;
using quant_k::kGroupMaxEps;
using quant_k::nearest_int;

namespace {

// Packs 256 2-bit codes as Q2_K and Q3_K store their low bits: byte 32h + l holds
// elements 128h + l + {0, 32, 64, 96} in bit pairs 0, 2, 4, 6.
void pack_2bit(const uint8_t* codes, uint8_t* qs) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* c = codes + 128 * h + l;
      qs[32 * h + l] = static_cast<uint8_t>(c[0] | (c[32] << 2) | (c[64] << 4) | (c[96] << 6));
    }
}

// Q4_K/Q5_K: 6-bit codes of the 8 group scales (ls) and mins (lm), packed as
// unpack_scale_min_k4 reads them.
void pack_scales_mins_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* packed) {
  std::memset(packed, 0, kKScaleBytes);
  for (int g = 0; g < 8; ++g) {
    if (g < 4) {
      packed[g] = ls[g];
      packed[g + 4] = lm[g];
    } else {
      packed[g + 4] = static_cast<uint8_t>((ls[g] & 0xf) | ((lm[g] & 0xf) << 4));
      packed[g - 4] |= static_cast<uint8_t>((ls[g] >> 4) << 6);
      packed[g] |= static_cast<uint8_t>((lm[g] >> 4) << 6);
    }
  }
}

// Q4_K/Q5_K reference: per-group scales and mins (8 groups of 32) quantized to 6 bits
// against their maxima; stores d and dmin.
void store_scales_mins_k4(const float* scales, const float* mins, uint8_t* packed,
                          uint16_t* d, uint16_t* dmin) {
  float max_scale = 0;
  float max_min = 0;
  for (int g = 0; g < 8; ++g) {
    if (scales[g] > max_scale) max_scale = scales[g];
    if (mins[g] > max_min) max_min = mins[g];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  // The uint8 wrap of a negative code, then the clamp, are ggml's.
  const auto code6 = [](float v) {
    return std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(v)));
  };
  uint8_t ls[8];
  uint8_t lm[8];
  for (int g = 0; g < 8; ++g) {
    ls[g] = code6(inv_scale * scales[g]);
    lm[g] = code6(inv_min * mins[g]);
  }
  pack_scales_mins_k4(ls, lm, packed);
  *d = fp32_to_fp16(max_scale / 63.f);
  *dmin = fp32_to_fp16(max_min / 63.f);
}

// Q4_K/Q5_K weighted: group scales and mins quantized by the weighted search, each group
// weighing the sum of its values' weights (sum_weights). ggml clamps the codes at 63 for
// Q5_K only, which matters only if a negative group scale wrapped its uint8 code.
void store_scales_mins_k4_weighted(const float* scales, const float* mins, const float* sum_weights,
                                   bool clamp_codes, uint8_t* packed, uint16_t* d, uint16_t* dmin) {
  uint8_t ls[8];
  uint8_t lm[8];
  const float d_block = fit_positive_scale(8, 63, scales, sum_weights, ls);
  const float m_block = fit_positive_scale(8, 63, mins, sum_weights, lm);
  for (int g = 0; g < 8 && clamp_codes; ++g) {
    ls[g] = std::min<uint8_t>(63, ls[g]);
    lm[g] = std::min<uint8_t>(63, lm[g]);
  }
  pack_scales_mins_k4(ls, lm, packed);
  *d = fp32_to_fp16(d_block);
  *dmin = fp32_to_fp16(m_block);
}

// Q4_K/Q5_K: fits all 8 groups of a super-block and re-rounds against the stored scales;
// codes in 0..nmax. Without importance, weights favour large values (the reference);
// with it, value x weighs importance * sqrt(sigma2 + x^2), sigma2 twice the super-block's
// mean square, and the search is finer.
void quantize_super_block_k4(const float* x, int nmax, float rmin, int nstep, uint8_t* packed,
                             uint16_t* d, uint16_t* dmin, uint8_t* codes, const float* importance) {
  float scales[8];
  float mins[8];
  float sum_weights[8];
  float weights[32];
  uint8_t scratch[32];
  float sigma2 = 0;
  if (importance != nullptr) {
    float sum_x2 = 0;
    for (int l = 0; l < kQK_K; ++l) sum_x2 += x[l] * x[l];
    sigma2 = 2 * sum_x2 / kQK_K;
  }
  for (int g = 0; g < 8; ++g) {
    const float* xg = x + 32 * g;
    if (importance != nullptr) {
      const float* ig = importance + 32 * g;
      for (int l = 0; l < 32; ++l) weights[l] = ig[l] * std::sqrt(sigma2 + xg[l] * xg[l]);
      sum_weights[g] = 0;
      for (int l = 0; l < 32; ++l) sum_weights[g] += weights[l];
      scales[g] = fit_scale_and_min(32, nmax, xg, weights, codes + 32 * g, &mins[g], scratch,
                                    -0.9f, 0.05f, 36, false);
      continue;
    }
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xg[l] * xg[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xg[l]);
    scales[g] = fit_scale_and_min(32, nmax, xg, weights, codes + 32 * g, &mins[g], scratch,
                                  rmin, 0.1f, nstep, false);
  }
  if (importance != nullptr)
    store_scales_mins_k4_weighted(scales, mins, sum_weights, /*clamp_codes=*/nmax == 31, packed, d, dmin);
  else
    store_scales_mins_k4(scales, mins, packed, d, dmin);
  for (int g = 0; g < 8; ++g) {
    uint8_t scale, min;
    unpack_scale_min_k4(g, packed, &scale, &min);
    const float dl = fp16_to_fp32(*d) * static_cast<float>(scale);
    if (dl == 0.0f) continue;
    const float ml = fp16_to_fp32(*dmin) * static_cast<float>(min);
    for (int l = 0; l < 32; ++l) {
      const int q = nearest_int((x[32 * g + l] + ml) / dl);
      codes[32 * g + l] = static_cast<uint8_t>(std::max(0, std::min(nmax, q)));
    }
  }
}

}  // namespace

void quantize_row_q2_k(const float* src, void* dst, int64_t n) {
  assert(n % kQK_K == 0);
  auto* blocks = static_cast<BlockQ2_K*>(dst);
  constexpr float kScaleLevels = 15.f;  // scales and mins are 4-bit
  for (int64_t b = 0; b < n / kQK_K; ++b, src += kQK_K) {
    BlockQ2_K& y = blocks[b];
    uint8_t codes[kQK_K];
    uint8_t scratch[16];
    float weights[16];
    float scales[16];
    float mins[16];
    float max_scale = 0;
    float max_min = 0;
    for (int g = 0; g < 16; ++g) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(src[16 * g + l]);
      scales[g] = fit_scale_and_min(16, 3, src + 16 * g, weights, codes + 16 * g, &mins[g],
                                    scratch, -0.5f, 0.1f, 15, true);
      if (scales[g] > max_scale) max_scale = scales[g];
      if (mins[g] > max_min) max_min = mins[g];
    }
    if (max_scale > 0) {
      const float iscale = kScaleLevels / max_scale;
      for (int g = 0; g < 16; ++g)
        y.scales[g] = static_cast<uint8_t>(nearest_int(iscale * scales[g]));
      y.d = fp32_to_fp16(max_scale / kScaleLevels);
    } else {
      std::memset(y.scales, 0, sizeof(y.scales));
      y.d = fp32_to_fp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = kScaleLevels / max_min;
      for (int g = 0; g < 16; ++g)
        y.scales[g] |= static_cast<uint8_t>(nearest_int(iscale * mins[g]) << 4);
      y.dmin = fp32_to_fp16(max_min / kScaleLevels);
    } else {
      y.dmin = fp32_to_fp16(0.f);
    }
    for (int g = 0; g < 16; ++g) {
      const float dl = fp16_to_fp32(y.d) * static_cast<float>(y.scales[g] & 0xf);
      if (dl == 0.0f) continue;
      const float ml = fp16_to_fp32(y.dmin) * static_cast<float>(y.scales[g] >> 4);
      for (int l = 0; l < 16; ++l) {
        const int q = nearest_int((src[16 * g + l] + ml) / dl);
        codes[16 * g + l] = static_cast<uint8_t>(std::max(0, std::min(3, q)));
      }
    }
    pack_2bit(codes, y.qs);
  }
}

void quantize_row_q3_k(const float* src, void* dst, int64_t n) {
  assert(n % kQK_K == 0);
  auto* blocks = static_cast<BlockQ3_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b, src += kQK_K) {
    BlockQ3_K& y = blocks[b];
    int8_t codes[kQK_K];
    float scales[16];
    float max_scale = 0;  // the group scale of largest magnitude, with its sign
    float amax = 0;
    for (int g = 0; g < 16; ++g) {
      scales[g] = fit_symmetric_scale_q3(16, 4, src + 16 * g, codes + 16 * g);
      if (std::fabs(scales[g]) > amax) {
        amax = std::fabs(scales[g]);
        max_scale = scales[g];
      }
    }
    // 6-bit group scales: low nibbles in bytes 0..7 (groups g, g+8), top bit pairs in
    // bytes 8..11.
    std::memset(y.scales, 0, sizeof(y.scales));
    if (max_scale != 0.0f) {
      const float iscale = -32.f / max_scale;
      for (int g = 0; g < 16; ++g) {
        int8_t l = static_cast<int8_t>(nearest_int(iscale * scales[g]));
        l = static_cast<int8_t>(std::max<int8_t>(-32, std::min<int8_t>(31, l)) + 32);
        if (g < 8)
          y.scales[g] = static_cast<uint8_t>(l & 0xf);
        else
          y.scales[g - 8] |= static_cast<uint8_t>((l & 0xf) << 4);
        y.scales[g % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (g / 4)));
      }
      y.d = fp32_to_fp16(1 / iscale);
    } else {
      y.d = fp32_to_fp16(0.f);
    }
    for (int g = 0; g < 16; ++g) {
      const int low = g < 8 ? (y.scales[g] & 0xf) : (y.scales[g - 8] >> 4);
      const int high = (y.scales[8 + g % 4] >> (2 * (g / 4))) & 3;
      const int8_t scale = static_cast<int8_t>((low | (high << 4)) - 32);
      const float dl = fp16_to_fp32(y.d) * static_cast<float>(scale);
      if (dl == 0.0f) continue;
      for (int l = 0; l < 16; ++l) {
        const int q = nearest_int(src[16 * g + l] / dl);
        codes[16 * g + l] = static_cast<int8_t>(std::max(-4, std::min(3, q)) + 4);
      }
    }
    // Codes are 0..7: bit 2 goes to hmask (element e: bit e/32 of byte e%32), the low
    // two bits to qs.
    std::memset(y.hmask, 0, sizeof(y.hmask));
    uint8_t low_bits[kQK_K];
    for (int e = 0; e < kQK_K; ++e) {
      if (codes[e] > 3) y.hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
      low_bits[e] = static_cast<uint8_t>(codes[e] & 3);
    }
    pack_2bit(low_bits, y.qs);
  }
}

namespace {

// The K-quant rows with importance ([n], the weighted variants) or without (null: the
// references); importance advances with src.
void quantize_q4_k(const float* src, void* dst, int64_t n, const float* importance) {
  assert(n % kQK_K == 0);
  auto* blocks = static_cast<BlockQ4_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b, src += kQK_K) {
    BlockQ4_K& y = blocks[b];
    uint8_t codes[kQK_K];
    quantize_super_block_k4(src, 15, -1.f, 20, y.scales, &y.d, &y.dmin, codes,
                            importance ? importance + b * kQK_K : nullptr);
    for (int h = 0; h < 4; ++h)  // group 2h in low nibbles, 2h+1 in high nibbles
      for (int l = 0; l < 32; ++l)
        y.qs[32 * h + l] =
            static_cast<uint8_t>(codes[64 * h + l] | (codes[64 * h + 32 + l] << 4));
  }
}

void quantize_q5_k(const float* src, void* dst, int64_t n, const float* importance) {
  assert(n % kQK_K == 0);
  auto* blocks = static_cast<BlockQ5_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b, src += kQK_K) {
    BlockQ5_K& y = blocks[b];
    uint8_t codes[kQK_K];
    quantize_super_block_k4(src, 31, -0.5f, 15, y.scales, &y.d, &y.dmin, codes,
                            importance ? importance + b * kQK_K : nullptr);
    std::memset(y.qh, 0, sizeof(y.qh));
    for (int h = 0; h < 4; ++h)
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = codes[64 * h + l];       // group 2h
        const uint8_t hi = codes[64 * h + 32 + l];  // group 2h+1
        y.qs[32 * h + l] = static_cast<uint8_t>((lo & 0xf) | ((hi & 0xf) << 4));
        y.qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * h)) | ((hi >> 4) << (2 * h + 1)));
      }
  }
}

// Q6_K weighted differs only in the group fit: weighted by the importance alone.
void quantize_q6_k(const float* src, void* dst, int64_t n, const float* importance) {
  assert(n % kQK_K == 0);
  auto* blocks = static_cast<BlockQ6_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b, src += kQK_K) {
    BlockQ6_K& y = blocks[b];
    int8_t codes[kQK_K];
    float scales[16];
    float max_scale = 0;  // the group scale of largest magnitude, with its sign
    float max_abs_scale = 0;
    for (int g = 0; g < 16; ++g) {
      const float* x = src + 16 * g;
      scales[g] = importance != nullptr
                      ? fit_symmetric_scale_weighted(16, 32, x, importance + b * kQK_K + 16 * g, codes + 16 * g)
                      : fit_symmetric_scale(16, 32, x, codes + 16 * g);
      if (std::fabs(scales[g]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[g]);
        max_scale = scales[g];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y, 0, sizeof(y));
      y.d = fp32_to_fp16(0.f);
      continue;
    }
    const float iscale = -128.f / max_scale;
    y.d = fp32_to_fp16(1 / iscale);
    for (int g = 0; g < 16; ++g)
      y.scales[g] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[g])));
    for (int g = 0; g < 16; ++g) {
      const float dl = fp16_to_fp32(y.d) * static_cast<float>(y.scales[g]);
      if (dl == 0.0f) continue;
      for (int l = 0; l < 16; ++l) {
        const int q = nearest_int(src[16 * g + l] / dl);
        codes[16 * g + l] = static_cast<int8_t>(std::max(-32, std::min(31, q)) + 32);
      }
    }
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const int8_t* c = codes + 128 * h + l;  // elements +0, +32, +64, +96
        y.ql[64 * h + l] = static_cast<uint8_t>((c[0] & 0xf) | ((c[64] & 0xf) << 4));
        y.ql[64 * h + l + 32] = static_cast<uint8_t>((c[32] & 0xf) | ((c[96] & 0xf) << 4));
        y.qh[32 * h + l] = static_cast<uint8_t>((c[0] >> 4) | ((c[32] >> 4) << 2) |
                                                ((c[64] >> 4) << 4) | ((c[96] >> 4) << 6));
      }
  }
}

}  // namespace

void quantize_row_q4_k(const float* src, void* dst, int64_t n) { quantize_q4_k(src, dst, n, nullptr); }
void quantize_row_q5_k(const float* src, void* dst, int64_t n) { quantize_q5_k(src, dst, n, nullptr); }
void quantize_row_q6_k(const float* src, void* dst, int64_t n) { quantize_q6_k(src, dst, n, nullptr); }

void quantize_row_q4_k_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_q4_k(src, dst, n, importance);
}
void quantize_row_q5_k_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_q5_k(src, dst, n, importance);
}
void quantize_row_q6_k_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_q6_k(src, dst, n, importance);
}

void quantize_row_q8_k(const float* src, void* dst, int64_t n) {
  assert(n % kQK_K == 0);
  auto* blocks = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b, src += kQK_K) {
    BlockQ8_K& y = blocks[b];
    float max = 0;
    float amax = 0;
    for (int e = 0; e < kQK_K; ++e) {
      if (std::fabs(src[e]) > amax) {
        amax = std::fabs(src[e]);
        max = src[e];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    // -127 rather than -128 keeps every code in -127..127, so sign tricks in SIMD dot
    // products cannot overflow.
    const float iscale = -127.f / max;
    for (int e = 0; e < kQK_K; ++e)
      y.qs[e] = static_cast<int8_t>(std::min(127, nearest_int(iscale * src[e])));
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y.qs[16 * g + l];
      y.bsums[g] = static_cast<int16_t>(sum);
    }
    y.d = 1 / iscale;
  }
}

}  // namespace ridge
