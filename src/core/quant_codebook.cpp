// Dequantization of the codebook and ternary formats: IQ4_NL and IQ4_XS (a non-uniform
// 4-bit codebook), MXFP4 (E2M1 values under a power-of-two scale), TQ1_0 and TQ2_0
// (ternary). Each value is one float product in the order ggml computes it, so results
// match GGUF's definition to the bit.
#include "core/quant_exact_fp.h"  // first: no FMA contraction in this file

#include <bit>
#include <cassert>

#include "core/fp16.h"
#include "core/quant.h"
#include "core/quant_blocks.h"

namespace ridge {
namespace {

// Half of 2^(e - 127), as a float: the MXFP4 table holds doubled values. e = 0 and 1 give
// subnormals (2^-128, 2^-127), the rest normal floats with exponent e - 1.
float e8m0_to_fp32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t{0x00200000} << e : static_cast<uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

// The trit k (0..4) of a byte holding them as a base-3 fraction of 256, minus one.
int ternary_digit(uint8_t byte, int k) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const auto shifted = static_cast<uint8_t>(byte * kPow3[k]);  // wraps mod 256 by design
  return ((shifted * 3) >> 8) - 1;
}

}  // namespace

void dequantize_row_iq4_nl(const void* src, float* dst, int64_t n) {
  assert(n % kQK4_NL == 0);
  const auto* blocks = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t b = 0; b < n / kQK4_NL; ++b) {
    const float d = fp16_to_fp32(blocks[b].d);
    float* y = dst + b * kQK4_NL;
    for (int j = 0; j < kQK4_NL / 2; ++j) {
      y[j] = d * static_cast<float>(kIq4nlValues[blocks[b].qs[j] & 0xf]);
      y[j + kQK4_NL / 2] = d * static_cast<float>(kIq4nlValues[blocks[b].qs[j] >> 4]);
    }
  }
}

void dequantize_row_iq4_xs(const void* src, float* dst, int64_t n) {
  assert(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ4_XS& block = blocks[b];
    const float d = fp16_to_fp32(block.d);
    float* y = dst + b * kQK_K;
    for (int g = 0; g < kQK_K / 32; ++g) {
      const int scale = ((block.scales_l[g / 2] >> (4 * (g % 2))) & 0xf) | (((block.scales_h >> (2 * g)) & 3) << 4);
      const float dl = d * static_cast<float>(scale - 32);
      const uint8_t* qs = block.qs + 16 * g;
      for (int j = 0; j < 16; ++j) {
        y[32 * g + j] = dl * static_cast<float>(kIq4nlValues[qs[j] & 0xf]);
        y[32 * g + 16 + j] = dl * static_cast<float>(kIq4nlValues[qs[j] >> 4]);
      }
    }
  }
}

void dequantize_row_mxfp4(const void* src, float* dst, int64_t n) {
  assert(n % kQKMxfp4 == 0);
  const auto* blocks = static_cast<const BlockMXFP4*>(src);
  for (int64_t b = 0; b < n / kQKMxfp4; ++b) {
    const float d = e8m0_to_fp32_half(blocks[b].e);
    float* y = dst + b * kQKMxfp4;
    for (int j = 0; j < kQKMxfp4 / 2; ++j) {
      y[j] = d * static_cast<float>(kMxfp4DoubledValues[blocks[b].qs[j] & 0xf]);
      y[j + kQKMxfp4 / 2] = d * static_cast<float>(kMxfp4DoubledValues[blocks[b].qs[j] >> 4]);
    }
  }
}

void dequantize_row_tq1_0(const void* src, float* dst, int64_t n) {
  assert(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockTQ1_0*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockTQ1_0& block = blocks[b];
    const float d = fp16_to_fp32(block.d);
    float* y = dst + b * kQK_K;
    for (int k = 0; k < 5; ++k)
      for (int m = 0; m < 32; ++m) y[32 * k + m] = d * static_cast<float>(ternary_digit(block.qs[m], k));
    for (int k = 0; k < 5; ++k)
      for (int m = 0; m < 16; ++m) y[160 + 16 * k + m] = d * static_cast<float>(ternary_digit(block.qs[32 + m], k));
    for (int k = 0; k < 4; ++k)
      for (int m = 0; m < 4; ++m) y[240 + 4 * k + m] = d * static_cast<float>(ternary_digit(block.qh[m], k));
  }
}

void dequantize_row_tq2_0(const void* src, float* dst, int64_t n) {
  assert(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockTQ2_0*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockTQ2_0& block = blocks[b];
    const float d = fp16_to_fp32(block.d);
    float* y = dst + b * kQK_K;
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 4; ++k)
        for (int m = 0; m < 32; ++m)
          y[128 * h + 32 * k + m] = d * static_cast<float>(((block.qs[32 * h + m] >> (2 * k)) & 3) - 1);
  }
}

}  // namespace ridge
