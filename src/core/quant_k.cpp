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
    for (int e = 0; e < kQK_K; ++e) {
      const int half = e / 128, lane = e % 32, shift = 2 * ((e % 128) / 32);
      const uint8_t scale_min = block.scales[e / 16];
      const float dl = d * static_cast<float>(scale_min & 0xf);
      const float ml = dmin * static_cast<float>(scale_min >> 4);
      const int q = (block.qs[32 * half + lane] >> shift) & 3;
      dst[b * kQK_K + e] = dl * static_cast<float>(q) - ml;
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
    for (int e = 0; e < kQK_K; ++e) {
      const int half = e / 128, lane = e % 32, shift = 2 * ((e % 128) / 32);
      const float dl = d * static_cast<float>(scales[e / 16]);
      const int low = (block.qs[32 * half + lane] >> shift) & 3;
      const bool high = (block.hmask[lane] >> (e / 32)) & 1;
      dst[b * kQK_K + e] = dl * static_cast<float>(low - (high ? 0 : 4));
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
    for (int e = 0; e < kQK_K; ++e) {
      // Element 128h + 32k + l: quarter k picks the ql byte (l or l+32) and nibble (k/2),
      // and bit pair k of qh.
      const int half = e / 128, quarter = (e % 128) / 32, lane = e % 32;
      const uint8_t low_byte = block.ql[64 * half + lane + 32 * (quarter % 2)];
      const int low = (low_byte >> (4 * (quarter / 2))) & 0xf;
      const int high = (block.qh[32 * half + lane] >> (2 * quarter)) & 3;
      const int q = (low | (high << 4)) - 32;
      dst[b * kQK_K + e] = d * static_cast<float>(block.scales[e / 16]) * static_cast<float>(q);
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
