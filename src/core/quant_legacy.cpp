// The 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1): dequantization as
// GGUF defines it, ggml's reference quantizers and its importance-weighted ones
// (core/quant_weighted.h), float operations in their order.
#include "core/quant_exact_fp.h"  // first: no FMA contraction in this file

#include <algorithm>
#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/fp16.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/quant_k_search.h"
#include "core/quant_weighted.h"

namespace ridge {
namespace {

// The value of largest magnitude, with its sign (the first one on ties), and its
// magnitude; the symmetric formats map it to the most negative code.
struct SignedMax {
  float value = 0.0f;
  float magnitude = 0.0f;
};

SignedMax signed_max(const float* x, int n) {
  SignedMax m;
  for (int i = 0; i < n; ++i) {
    if (m.magnitude < std::fabs(x[i])) {
      m.magnitude = std::fabs(x[i]);
      m.value = x[i];
    }
  }
  return m;
}

struct Range {
  float min = FLT_MAX;
  float max = -FLT_MAX;
};

Range value_range(const float* x, int n) {
  Range r;
  for (int i = 0; i < n; ++i) {
    if (x[i] < r.min) r.min = x[i];
    if (x[i] > r.max) r.max = x[i];
  }
  return r;
}

float reciprocal_or_zero(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

// Codes are truncated after adding 0.5 (or 8.5, 16.5), as ggml does: round half up.
uint8_t truncated_code(float shifted, int max_code) {
  return static_cast<uint8_t>(std::min(max_code, static_cast<int>(shifted)));
}

// Bit 4 of each element's 5-bit code, element j at bit j of a little-endian uint32.
uint32_t read_high_bits(const uint8_t qh[4]) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof(bits));
  return bits;
}

}  // namespace

// --- Q4_0 -------------------------------------------------------------------------------

void dequantize_row_q4_0(const void* src, float* dst, int64_t n) {
  assert(n % kQK4_0 == 0);
  const auto* blocks = static_cast<const BlockQ4_0*>(src);
  for (int64_t b = 0; b < n / kQK4_0; ++b, dst += kQK4_0) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const int lo = (blocks[b].qs[j] & 0x0f) - 8;
      const int hi = (blocks[b].qs[j] >> 4) - 8;
      dst[j] = static_cast<float>(lo) * d;
      dst[j + kQK4_0 / 2] = static_cast<float>(hi) * d;
    }
  }
}

void quantize_row_q4_0(const float* src, void* dst, int64_t n) {
  assert(n % kQK4_0 == 0);
  auto* blocks = static_cast<BlockQ4_0*>(dst);
  for (int64_t b = 0; b < n / kQK4_0; ++b, src += kQK4_0) {
    const float d = signed_max(src, kQK4_0).value / -8;  // the extreme value gets code 0
    const float id = reciprocal_or_zero(d);
    blocks[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const uint8_t lo = truncated_code(src[j] * id + 8.5f, 15);
      const uint8_t hi = truncated_code(src[j + kQK4_0 / 2] * id + 8.5f, 15);
      blocks[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

// --- Q4_1 -------------------------------------------------------------------------------

void dequantize_row_q4_1(const void* src, float* dst, int64_t n) {
  assert(n % kQK4_1 == 0);
  const auto* blocks = static_cast<const BlockQ4_1*>(src);
  for (int64_t b = 0; b < n / kQK4_1; ++b, dst += kQK4_1) {
    const float d = fp16_to_fp32(blocks[b].d);
    const float m = fp16_to_fp32(blocks[b].m);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      dst[j] = static_cast<float>(blocks[b].qs[j] & 0x0f) * d + m;
      dst[j + kQK4_1 / 2] = static_cast<float>(blocks[b].qs[j] >> 4) * d + m;
    }
  }
}

void quantize_row_q4_1(const float* src, void* dst, int64_t n) {
  assert(n % kQK4_1 == 0);
  auto* blocks = static_cast<BlockQ4_1*>(dst);
  for (int64_t b = 0; b < n / kQK4_1; ++b, src += kQK4_1) {
    const Range r = value_range(src, kQK4_1);
    const float d = (r.max - r.min) / 15;
    const float id = reciprocal_or_zero(d);
    blocks[b].d = fp32_to_fp16(d);
    blocks[b].m = fp32_to_fp16(r.min);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      const uint8_t lo = truncated_code((src[j] - r.min) * id + 0.5f, 15);
      const uint8_t hi = truncated_code((src[j + kQK4_1 / 2] - r.min) * id + 0.5f, 15);
      blocks[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

// --- Q5_0 -------------------------------------------------------------------------------

void dequantize_row_q5_0(const void* src, float* dst, int64_t n) {
  assert(n % kQK5_0 == 0);
  const auto* blocks = static_cast<const BlockQ5_0*>(src);
  for (int64_t b = 0; b < n / kQK5_0; ++b, dst += kQK5_0) {
    const float d = fp16_to_fp32(blocks[b].d);
    const uint32_t qh = read_high_bits(blocks[b].qh);
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const int lo = ((blocks[b].qs[j] & 0x0f) | (((qh >> j) & 1) << 4)) - 16;
      const int hi = ((blocks[b].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      dst[j] = static_cast<float>(lo) * d;
      dst[j + kQK5_0 / 2] = static_cast<float>(hi) * d;
    }
  }
}

void quantize_row_q5_0(const float* src, void* dst, int64_t n) {
  assert(n % kQK5_0 == 0);
  auto* blocks = static_cast<BlockQ5_0*>(dst);
  for (int64_t b = 0; b < n / kQK5_0; ++b, src += kQK5_0) {
    const float d = signed_max(src, kQK5_0).value / -16;
    const float id = reciprocal_or_zero(d);
    blocks[b].d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const uint8_t lo = truncated_code(src[j] * id + 16.5f, 31);
      const uint8_t hi = truncated_code(src[j + kQK5_0 / 2] * id + 16.5f, 31);
      blocks[b].qs[j] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
      qh |= static_cast<uint32_t>(lo >> 4) << j;
      qh |= static_cast<uint32_t>(hi >> 4) << (j + kQK5_0 / 2);
    }
    std::memcpy(blocks[b].qh, &qh, sizeof(qh));
  }
}

// --- Q5_1 -------------------------------------------------------------------------------

void dequantize_row_q5_1(const void* src, float* dst, int64_t n) {
  assert(n % kQK5_1 == 0);
  const auto* blocks = static_cast<const BlockQ5_1*>(src);
  for (int64_t b = 0; b < n / kQK5_1; ++b, dst += kQK5_1) {
    const float d = fp16_to_fp32(blocks[b].d);
    const float m = fp16_to_fp32(blocks[b].m);
    const uint32_t qh = read_high_bits(blocks[b].qh);
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      const int lo = (blocks[b].qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
      const int hi = (blocks[b].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      dst[j] = static_cast<float>(lo) * d + m;
      dst[j + kQK5_1 / 2] = static_cast<float>(hi) * d + m;
    }
  }
}

void quantize_row_q5_1(const float* src, void* dst, int64_t n) {
  assert(n % kQK5_1 == 0);
  auto* blocks = static_cast<BlockQ5_1*>(dst);
  for (int64_t b = 0; b < n / kQK5_1; ++b, src += kQK5_1) {
    const Range r = value_range(src, kQK5_1);
    const float d = (r.max - r.min) / 31;
    const float id = reciprocal_or_zero(d);
    blocks[b].d = fp32_to_fp16(d);
    blocks[b].m = fp32_to_fp16(r.min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      const uint8_t lo = truncated_code((src[j] - r.min) * id + 0.5f, 31);
      const uint8_t hi = truncated_code((src[j + kQK5_1 / 2] - r.min) * id + 0.5f, 31);
      blocks[b].qs[j] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
      qh |= static_cast<uint32_t>(lo >> 4) << j;
      qh |= static_cast<uint32_t>(hi >> 4) << (j + kQK5_1 / 2);
    }
    std::memcpy(blocks[b].qh, &qh, sizeof(qh));
  }
}

// --- Q8_0 and Q8_1 ----------------------------------------------------------------------

void dequantize_row_q8_0(const void* src, float* dst, int64_t n) {
  assert(n % kQK8_0 == 0);
  const auto* blocks = static_cast<const BlockQ8_0*>(src);
  for (int64_t b = 0; b < n / kQK8_0; ++b, dst += kQK8_0) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int j = 0; j < kQK8_0; ++j) dst[j] = static_cast<float>(blocks[b].qs[j]) * d;
  }
}

// Fills d and qs of a Q8_0-style block of 32; returns the unrounded scale and sum(qs)
// (Q8_1 stores their product).
struct Q8Block {
  float d;
  int sum;
};

static Q8Block quantize_block_q8(const float* x, uint16_t* d_out, int8_t* qs) {
  float amax = 0.0f;
  for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = reciprocal_or_zero(d);
  *d_out = fp32_to_fp16(d);
  int sum = 0;
  for (int j = 0; j < kQK8_0; ++j) {
    qs[j] = static_cast<int8_t>(std::round(x[j] * id));  // half away from zero, as roundf
    sum += qs[j];
  }
  return {d, sum};
}

void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
  assert(n % kQK8_0 == 0);
  auto* blocks = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK8_0; ++b, src += kQK8_0)
    quantize_block_q8(src, &blocks[b].d, blocks[b].qs);
}

void dequantize_row_q8_1(const void* src, float* dst, int64_t n) {
  assert(n % kQK8_1 == 0);
  const auto* blocks = static_cast<const BlockQ8_1*>(src);
  for (int64_t b = 0; b < n / kQK8_1; ++b, dst += kQK8_1) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int j = 0; j < kQK8_1; ++j) dst[j] = static_cast<float>(blocks[b].qs[j]) * d;
  }
}

void quantize_row_q8_1(const float* src, void* dst, int64_t n) {
  assert(n % kQK8_1 == 0);
  auto* blocks = static_cast<BlockQ8_1*>(dst);
  for (int64_t b = 0; b < n / kQK8_1; ++b, src += kQK8_1) {
    const Q8Block q = quantize_block_q8(src, &blocks[b].d, blocks[b].qs);
    // ggml multiplies by the unrounded float scale, not the stored f16 one.
    blocks[b].s = fp32_to_fp16(static_cast<float>(q.sum) * q.d);
  }
}

// --- Importance-weighted (core/quant_weighted.h) ------------------------------------------

namespace {

// Value x of a row weighs importance * sqrt(sigma2 + x^2), sigma2 the row's mean square:
// the importance of its column, more for large values, never nothing for small ones.
float mean_square(const float* x, int64_t n) {
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += x[j] * x[j];
  return sum / static_cast<float>(n);
}

void value_weights(const float* x, const float* importance, float sigma2, float* weights) {
  for (int j = 0; j < 32; ++j) weights[j] = importance[j] * std::sqrt(sigma2 + x[j] * x[j]);
}

// 32 codes of 4 bits: element j in the low nibble of byte j, element j + 16 in the high.
void pack_4bit(const uint8_t* codes, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(codes[j] | (codes[j + 16] << 4));
}

// 32 codes of 5 bits: the low four as pack_4bit, bit 4 of element j at bit j of qh.
void pack_5bit(const uint8_t* codes, uint8_t* qs, uint8_t* qh) {
  uint32_t high = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((codes[j] & 0x0f) | ((codes[j + 16] & 0x0f) << 4));
    high |= static_cast<uint32_t>(codes[j] >> 4) << j;
    high |= static_cast<uint32_t>(codes[j + 16] >> 4) << (j + 16);
  }
  std::memcpy(qh, &high, sizeof(high));
}

// Q4_0 and Q5_0: symmetric codes from the weighted scale search; d is its least-squares
// scale, not re-rounded against the stored f16.
template <typename Block>
void quantize_symmetric_weighted(const float* src, Block* blocks, int64_t n, const float* importance, int nmax) {
  const float sigma2 = mean_square(src, n);
  float weights[32];
  int8_t codes[32];
  for (int64_t b = 0; b < n / 32; ++b) {
    value_weights(src + 32 * b, importance + 32 * b, sigma2, weights);
    const float d = quant_k::fit_symmetric_scale_weighted(32, nmax, src + 32 * b, weights, codes);
    blocks[b].d = fp32_to_fp16(d);
    const auto* u = reinterpret_cast<const uint8_t*>(codes);
    if constexpr (std::is_same_v<Block, BlockQ4_0>)
      pack_4bit(u, blocks[b].qs);
    else
      pack_5bit(u, blocks[b].qs, blocks[b].qh);
  }
}

// Q4_1 and Q5_1: scale and min from the weighted search K-quants use for their groups.
template <typename Block>
void quantize_asymmetric_weighted(const float* src, Block* blocks, int64_t n, const float* importance, int nmax) {
  const float sigma2 = mean_square(src, n);
  float weights[32];
  uint8_t codes[32];
  uint8_t scratch[32];
  for (int64_t b = 0; b < n / 32; ++b) {
    value_weights(src + 32 * b, importance + 32 * b, sigma2, weights);
    float neg_min = 0;
    const float d = quant_k::fit_scale_and_min(32, nmax, src + 32 * b, weights, codes, &neg_min, scratch, -0.9f,
                                               0.05f, 36, false);
    blocks[b].d = fp32_to_fp16(d);
    blocks[b].m = fp32_to_fp16(-neg_min);
    if constexpr (std::is_same_v<Block, BlockQ4_1>)
      pack_4bit(codes, blocks[b].qs);
    else
      pack_5bit(codes, blocks[b].qs, blocks[b].qh);
  }
}

}  // namespace

void quantize_row_q4_0_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  assert(n % kQK4_0 == 0);
  quantize_symmetric_weighted(src, static_cast<BlockQ4_0*>(dst), n, importance, 8);
}

void quantize_row_q5_0_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  assert(n % kQK5_0 == 0);
  quantize_symmetric_weighted(src, static_cast<BlockQ5_0*>(dst), n, importance, 16);
}

void quantize_row_q4_1_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  assert(n % kQK4_1 == 0);
  quantize_asymmetric_weighted(src, static_cast<BlockQ4_1*>(dst), n, importance, 15);
}

void quantize_row_q5_1_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  assert(n % kQK5_1 == 0);
  quantize_asymmetric_weighted(src, static_cast<BlockQ5_1*>(dst), n, importance, 31);
}

}  // namespace ridge
