// Dequantization of the K-quant super-block formats (Q2_K..Q6_K, Q8_K) as GGUF defines
// it; each value is computed with the same float operations, in the same order, as
// ggml's dequantize_row_* so results match to the bit.
#include "core/quant_exact_fp.h"  // first: no FMA contraction in this file

#include <cassert>

#include "core/fp16.h"
#include "core/quant.h"
#include "core/quant_blocks.h"

namespace ridge {

void dequantize_row_q2_k(const void* src, float* dst, int64_t n) {
  assert(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockQ2_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ2_K& block = blocks[b];
    const float d = fp16_to_fp32(block.d);
    const float dmin = fp16_to_fp32(block.dmin);
    float* y = dst + b * kQK_K;
    for (int g = 0; g < 16; ++g) {
      // Group g: elements 16g..16g+15 = 128h + 32k + l with h = g/8, k = (g%8)/2 and
      // l from 16(g%2): bit pair k of qs[32h + l], scale and min from scales[g].
      const int half = g / 8, shift = 2 * ((g % 8) / 2);
      const uint8_t scale_min = block.scales[g];
      const float dl = d * static_cast<float>(scale_min & 0xf);
      const float ml = dmin * static_cast<float>(scale_min >> 4);
      const uint8_t* qs = block.qs + 32 * half + 16 * (g % 2);
      for (int i = 0; i < 16; ++i) y[16 * g + i] = dl * static_cast<float>((qs[i] >> shift) & 3) - ml;
    }
  }
}

void dequantize_row_q3_k(const void* src, float* dst, int64_t n) {
  assert(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockQ3_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ3_K& block = blocks[b];
    const float d = fp16_to_fp32(block.d);
    int scales[16];
    for (int g = 0; g < 16; ++g) {
      const int low = g < 8 ? (block.scales[g] & 0xf) : (block.scales[g - 8] >> 4);
      const int high = (block.scales[8 + g % 4] >> (2 * (g / 4))) & 3;
      scales[g] = (low | (high << 4)) - 32;
    }
    float* y = dst + b * kQK_K;
    for (int g = 0; g < 16; ++g) {
      // Group g as in Q2_K; the high bit of element 32j + l (j = g/2) is bit j of hmask[l].
      const int half = g / 8, shift = 2 * ((g % 8) / 2), lane0 = 16 * (g % 2);
      const float dl = d * static_cast<float>(scales[g]);
      const uint8_t* qs = block.qs + 32 * half + lane0;
      const uint8_t* hmask = block.hmask + lane0;
      for (int i = 0; i < 16; ++i) {
        const int low = (qs[i] >> shift) & 3;
        const bool high = (hmask[i] >> (g / 2)) & 1;
        y[16 * g + i] = dl * static_cast<float>(low - (high ? 0 : 4));
      }
    }
  }
}

void dequantize_row_q4_k(const void* src, float* dst, int64_t n) {
  assert(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockQ4_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K& block = blocks[b];
    const float d = fp16_to_fp32(block.d);
    const float dmin = fp16_to_fp32(block.dmin);
    for (int g = 0; g < 8; ++g) {  // group g: 32 elements, nibble g%2 of qs[32*(g/2) + l]
      uint8_t scale, min;
      unpack_scale_min_k4(g, block.scales, &scale, &min);
      const float dl = d * static_cast<float>(scale);
      const float ml = dmin * static_cast<float>(min);
      const uint8_t* qs = block.qs + 32 * (g / 2);
      const int shift = 4 * (g % 2);
      for (int l = 0; l < 32; ++l)
        dst[b * kQK_K + 32 * g + l] = dl * static_cast<float>((qs[l] >> shift) & 0xf) - ml;
    }
  }
}

void dequantize_row_q5_k(const void* src, float* dst, int64_t n) {
  assert(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockQ5_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ5_K& block = blocks[b];
    const float d = fp16_to_fp32(block.d);
    const float dmin = fp16_to_fp32(block.dmin);
    for (int g = 0; g < 8; ++g) {  // as Q4_K, plus bit g of qh[l] as the fifth bit
      uint8_t scale, min;
      unpack_scale_min_k4(g, block.scales, &scale, &min);
      const float dl = d * static_cast<float>(scale);
      const float ml = dmin * static_cast<float>(min);
      const uint8_t* qs = block.qs + 32 * (g / 2);
      const int shift = 4 * (g % 2);
      for (int l = 0; l < 32; ++l) {
        const int q = ((qs[l] >> shift) & 0xf) + (((block.qh[l] >> g) & 1) ? 16 : 0);
        dst[b * kQK_K + 32 * g + l] = dl * static_cast<float>(q) - ml;
      }
    }
  }
}

void dequantize_row_q6_k(const void* src, float* dst, int64_t n) {
  assert(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockQ6_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ6_K& block = blocks[b];
    const float d = fp16_to_fp32(block.d);
    float* y = dst + b * kQK_K;
    for (int g = 0; g < 16; ++g) {
      // Group g: elements 128h + 32k + l with h = g/8, k = (g%8)/2 and l from 16(g%2).
      // Quarter k picks the ql byte (l or l+32) and nibble (k/2), and bit pair k of qh.
      const int half = g / 8, quarter = (g % 8) / 2, lane0 = 16 * (g % 2);
      const float dl = d * static_cast<float>(block.scales[g]);
      const uint8_t* ql = block.ql + 64 * half + 32 * (quarter % 2) + lane0;
      const uint8_t* qh = block.qh + 32 * half + lane0;
      const int low_shift = 4 * (quarter / 2), high_shift = 2 * quarter;
      for (int i = 0; i < 16; ++i) {
        const int q = (((ql[i] >> low_shift) & 0xf) | (((qh[i] >> high_shift) & 3) << 4)) - 32;
        y[16 * g + i] = dl * static_cast<float>(q);
      }
    }
  }
}

void dequantize_row_q8_k(const void* src, float* dst, int64_t n) {
  assert(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockQ8_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b)
    for (int e = 0; e < kQK_K; ++e)
      dst[b * kQK_K + e] = blocks[b].d * static_cast<float>(blocks[b].qs[e]);
}

}  // namespace ridge
