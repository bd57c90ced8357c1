// Dequantization of the codebook and ternary formats: IQ4_NL and IQ4_XS (a non-uniform
// 4-bit codebook), the IQ2/IQ3/IQ1 grid types (codes index rows of a lattice,
// core/quant_grids.h), MXFP4 and NVFP4 (E2M1 values under a power-of-two or an E4M3
// scale), TQ1_0 and TQ2_0 (ternary). Each value is computed with the float operations in
// the order gguf-py and ggml use, so results match GGUF's definition to the bit.
// Quantizers for the types gguf-py quantizes (MXFP4, TQ1_0, TQ2_0), byte for byte as it
// does.
#include "core/quant_exact_fp.h"  // first: no FMA contraction in this file

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/quant_grids.h"

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

// gguf-py's np_roundf: half away from zero.
float round_half_away(float x) {
  const float a = std::fabs(x);
  const float floored = std::floor(a);
  const float b = floored + std::floor(2 * (a - floored));
  return x < 0 ? -b : b;
}

float max_magnitude(const float* x, int n) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}

// t + 1 in 0..2 for each x / amax rounded; all ones (zeros) for an all-zero block.
void ternary_codes(const float* x, uint8_t* t, float amax) {
  const float id = amax == 0 ? 0.0f : 1.0f / amax;
  for (int i = 0; i < kQK_K; ++i) t[i] = static_cast<uint8_t>(static_cast<int>(round_half_away(x[i] * id)) + 1);
}

// Packs n trits (n <= 5, most significant first) into a byte as a base-3 fraction of 256,
// rounded up so that ternary_digit reads them back.
uint8_t pack_trits(const uint8_t* t, int n, int stride) {
  static constexpr uint16_t kWeights[5] = {81, 27, 9, 3, 1};
  uint16_t sum = 0;
  for (int k = 0; k < n; ++k) sum = static_cast<uint16_t>(sum + t[k * stride] * kWeights[k]);
  return static_cast<uint8_t>((sum * 256 + 242) / 243);
}

// Unsigned E4M3 (bias 7, bit 7 ignored) halved, as NVFP4's E2M1 table holds doubled
// values; 0x7F, E4M3's NaN, reads as zero. Every result is exact in float.
float ue4m3_to_fp32_half(uint8_t x) {
  if (x == 0 || x == 0x7f) return 0.0f;
  const int exponent = (x >> 3) & 0xf;
  const int mantissa = x & 7;
  const float raw = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                  : std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  return raw * 0.5f;
}

uint32_t load_le32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);  // GGUF is little-endian, as are the hosts ridge runs on
  return v;
}

uint16_t load_le16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// y[j] = scale * magnitude[j], negated where bit j of `signs` is set: (scale * m) * +-1 as
// gguf-py computes it (negation is exact, so the order is the reference's).
template <typename Magnitude>
void put_signed(float* y, float scale, const Magnitude* magnitude, int count, uint32_t signs) {
  for (int j = 0; j < count; ++j) {
    const float v = scale * static_cast<float>(magnitude[j]);
    y[j] = (signs >> j) & 1 ? -v : v;
  }
}

// The f16 scale of an IQ1_M block, kept in the top nibbles of its four scale words.
uint16_t iq1m_scale_bits(const BlockIQ1_M& block) {
  uint16_t bits = 0;
  for (int k = 0; k < 4; ++k) bits = static_cast<uint16_t>(bits | ((load_le16(block.scales + 2 * k) >> 12) << (4 * k)));
  return bits;
}

}  // namespace

void quantize_row_tq1_0(const float* src, void* dst, int64_t n) {
  assert(n % kQK_K == 0);
  auto* blocks = static_cast<BlockTQ1_0*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    const float amax = max_magnitude(x, kQK_K);
    uint8_t t[kQK_K];
    ternary_codes(x, t, amax);
    BlockTQ1_0& block = blocks[b];
    for (int m = 0; m < 32; ++m) block.qs[m] = pack_trits(t + m, 5, 32);
    for (int m = 0; m < 16; ++m) block.qs[32 + m] = pack_trits(t + 160 + m, 5, 16);
    for (int m = 0; m < 4; ++m) block.qh[m] = pack_trits(t + 240 + m, 4, 4);
    block.d = fp32_to_fp16(amax);
  }
}

void quantize_row_tq2_0(const float* src, void* dst, int64_t n) {
  assert(n % kQK_K == 0);
  auto* blocks = static_cast<BlockTQ2_0*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    const float amax = max_magnitude(x, kQK_K);
    uint8_t t[kQK_K];
    ternary_codes(x, t, amax);
    BlockTQ2_0& block = blocks[b];
    for (int h = 0; h < 2; ++h)
      for (int m = 0; m < 32; ++m) {
        uint8_t byte = 0;
        for (int k = 0; k < 4; ++k) byte = static_cast<uint8_t>(byte | (t[128 * h + 32 * k + m] << (2 * k)));
        block.qs[32 * h + m] = byte;
      }
    block.d = fp32_to_fp16(amax);
  }
}

void quantize_row_mxfp4(const float* src, void* dst, int64_t n) {
  assert(n % kQKMxfp4 == 0);
  auto* blocks = static_cast<BlockMXFP4*>(dst);
  for (int64_t b = 0; b < n / kQKMxfp4; ++b) {
    const float* x = src + b * kQKMxfp4;
    const float amax = max_magnitude(x, kQKMxfp4);
    // The exponent that puts amax in E2M1's top binade (6 = 1.5 * 2^2), as gguf-py and
    // ggml compute it.
    const auto e = static_cast<uint8_t>(amax > 0 ? std::floor(std::log2(amax)) - 2 + 127 : 0);
    const float d = e8m0_to_fp32_half(e);
    uint8_t q[kQKMxfp4];
    for (int i = 0; i < kQKMxfp4; ++i) {
      int best = 0;
      float best_err = std::fabs(d * static_cast<float>(kMxfp4DoubledValues[0]) - x[i]);
      for (int k = 1; k < 16; ++k) {  // the first of equal errors wins
        const float err = std::fabs(d * static_cast<float>(kMxfp4DoubledValues[k]) - x[i]);
        if (err < best_err) best = k, best_err = err;
      }
      q[i] = static_cast<uint8_t>(best);
    }
    blocks[b].e = e;
    for (int j = 0; j < kQKMxfp4 / 2; ++j) blocks[b].qs[j] = static_cast<uint8_t>(q[j] | (q[j + kQKMxfp4 / 2] << 4));
  }
}

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

void dequantize_row_iq2_xxs(const void* src, float* dst, int64_t n) {
  assert(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockIQ2_XXS*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ2_XXS& block = blocks[b];
    const float d = fp16_to_fp32(block.d);
    for (int g = 0; g < kQK_K / 32; ++g) {
      const uint32_t rows = load_le32(block.qs + 8 * g);
      const uint32_t signs_scale = load_le32(block.qs + 8 * g + 4);
      const float dg = d * (0.5f + static_cast<float>(signs_scale >> 28)) * 0.25f;
      for (int k = 0; k < 4; ++k)
        put_signed(dst + b * kQK_K + 32 * g + 8 * k, dg, kIq2xxsGrid[(rows >> (8 * k)) & 0xff], 8,
                   kIq2Signs[(signs_scale >> (7 * k)) & 127]);
    }
  }
}

void dequantize_row_iq2_xs(const void* src, float* dst, int64_t n) {
  assert(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockIQ2_XS*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ2_XS& block = blocks[b];
    const float d = fp16_to_fp32(block.d);
    for (int i = 0; i < kQK_K / 8; ++i) {
      const int scale = (block.scales[i / 4] >> (4 * ((i / 2) % 2))) & 0xf;
      const float dg = d * (0.5f + static_cast<float>(scale)) * 0.25f;
      put_signed(dst + b * kQK_K + 8 * i, dg, kIq2xsGrid[block.qs[i] & 511], 8, kIq2Signs[block.qs[i] >> 9]);
    }
  }
}

void dequantize_row_iq2_s(const void* src, float* dst, int64_t n) {
  assert(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockIQ2_S*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ2_S& block = blocks[b];
    const float d = fp16_to_fp32(block.d);
    for (int i = 0; i < kQK_K / 8; ++i) {
      const int scale = (block.scales[i / 4] >> (4 * ((i / 2) % 2))) & 0xf;
      const float dg = d * (0.5f + static_cast<float>(scale)) * 0.25f;
      const int row = block.qs[i] | (((block.qh[i / 4] >> (2 * (i % 4))) & 3) << 8);
      put_signed(dst + b * kQK_K + 8 * i, dg, kIq2sGrid[row], 8, block.signs[i]);
    }
  }
}

void dequantize_row_iq3_xxs(const void* src, float* dst, int64_t n) {
  assert(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockIQ3_XXS*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ3_XXS& block = blocks[b];
    const float d = fp16_to_fp32(block.d);
    for (int g = 0; g < kQK_K / 32; ++g) {
      const uint32_t signs_scale = load_le32(block.scales_signs + 4 * g);
      const float dg = d * (0.5f + static_cast<float>(signs_scale >> 28)) * 0.5f;
      for (int k = 0; k < 4; ++k) {  // 8 values: two grid rows under one sign byte
        const uint32_t signs = kIq2Signs[(signs_scale >> (7 * k)) & 127];
        float* y = dst + b * kQK_K + 32 * g + 8 * k;
        put_signed(y, dg, kIq3xxsGrid[block.qs[8 * g + 2 * k]], 4, signs);
        put_signed(y + 4, dg, kIq3xxsGrid[block.qs[8 * g + 2 * k + 1]], 4, signs >> 4);
      }
    }
  }
}

void dequantize_row_iq3_s(const void* src, float* dst, int64_t n) {
  assert(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockIQ3_S*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ3_S& block = blocks[b];
    const float d = fp16_to_fp32(block.d);
    for (int i = 0; i < kQK_K / 4; ++i) {
      const int scale = (block.scales[i / 16] >> (4 * ((i / 8) % 2))) & 0xf;
      const float dg = d * static_cast<float>(1 + 2 * scale);
      const int row = block.qs[i] | (((block.qh[i / 8] >> (i % 8)) & 1) << 8);
      put_signed(dst + b * kQK_K + 4 * i, dg, kIq3sGrid[row], 4, block.signs[i / 2] >> (4 * (i % 2)));
    }
  }
}

void dequantize_row_iq1_s(const void* src, float* dst, int64_t n) {
  assert(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockIQ1_S*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ1_S& block = blocks[b];
    const float d = fp16_to_fp32(block.d);
    for (int g = 0; g < kQK_K / 32; ++g) {
      const uint16_t qh = block.qh[g];
      const float dg = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
      const float delta = qh & 0x8000 ? -kIq1Delta : kIq1Delta;
      for (int k = 0; k < 4; ++k) {
        const int8_t* grid = kIq1sGrid[block.qs[4 * g + k] | (((qh >> (3 * k)) & 7) << 8)];
        float* y = dst + b * kQK_K + 32 * g + 8 * k;
        for (int j = 0; j < 8; ++j) y[j] = dg * (static_cast<float>(grid[j]) + delta);
      }
    }
  }
}

void dequantize_row_iq1_m(const void* src, float* dst, int64_t n) {
  assert(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockIQ1_M*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ1_M& block = blocks[b];
    const float d = fp16_to_fp32(iq1m_scale_bits(block));
    for (int i = 0; i < kQK_K / 8; ++i) {
      const int k = i / 2;  // the scale codes 2k and 2k+1 share
      const int scale = (load_le16(block.scales + 2 * (k / 4)) >> (3 * (k % 4))) & 7;
      const float dg = d * static_cast<float>(2 * scale + 1);
      const int high = (block.qh[i / 2] >> (4 * (i % 2))) & 0xf;
      const float delta = high & 8 ? -kIq1Delta : kIq1Delta;
      const int8_t* grid = kIq1sGrid[block.qs[i] | ((high & 7) << 8)];
      float* y = dst + b * kQK_K + 8 * i;
      for (int j = 0; j < 8; ++j) y[j] = dg * (static_cast<float>(grid[j]) + delta);
    }
  }
}

void dequantize_row_nvfp4(const void* src, float* dst, int64_t n) {
  assert(n % kQKNvfp4 == 0);
  const auto* blocks = static_cast<const BlockNVFP4*>(src);
  for (int64_t b = 0; b < n / kQKNvfp4; ++b) {
    for (int s = 0; s < kQKNvfp4 / kQKNvfp4Sub; ++s) {
      const float d = ue4m3_to_fp32_half(blocks[b].d[s]);
      const uint8_t* qs = blocks[b].qs + s * kQKNvfp4Sub / 2;
      float* y = dst + b * kQKNvfp4 + s * kQKNvfp4Sub;
      for (int j = 0; j < kQKNvfp4Sub / 2; ++j) {
        y[j] = static_cast<float>(kMxfp4DoubledValues[qs[j] & 0xf]) * d;
        y[j + kQKNvfp4Sub / 2] = static_cast<float>(kMxfp4DoubledValues[qs[j] >> 4]) * d;
      }
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
