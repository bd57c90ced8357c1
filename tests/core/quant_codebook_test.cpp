// The codebook, grid and ternary formats (core/quant_codebook.cpp) on hand-made blocks whose
// values follow from the format by hand, and exact round trips of data each quantizer can
// represent. Bit-exactness against gguf-py on random blocks is tests/python/
// test_quant_reference.py; these pin the layouts without Python.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "core/quant.h"
#include "core/quant_blocks.h"

namespace ridge {
namespace {

std::vector<float> dequantize(DType type, const void* blocks, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(type, blocks, y.data(), n);
  return y;
}

TEST(QuantCodebook, Iq4nlLooksUpTheCodebookUnderTheScale) {
  BlockIQ4_NL b{};
  b.d = fp32_to_fp16(0.5f);
  b.qs[0] = 0x8f;  // element 0: code 15 (113), element 16: code 8 (1)
  b.qs[3] = 0x70;  // element 3: code 0 (-127), element 19: code 7 (-10)
  const auto y = dequantize(DType::IQ4_NL, &b, 32);
  EXPECT_EQ(y[0], 56.5f);
  EXPECT_EQ(y[16], 0.5f);
  EXPECT_EQ(y[3], -63.5f);
  EXPECT_EQ(y[19], -5.0f);
}

TEST(QuantCodebook, Iq4xsGroupScalesAreSixBitsSplitInTwoFields) {
  BlockIQ4_XS b{};
  b.d = fp32_to_fp16(1.0f);
  // Group 0: s = 33 (low nibble 1, top bits 2) -> x = 1 * code; group 7: s = 30 (low 14,
  // top 1) -> x = -2 * code.
  b.scales_l[0] = 0x01;
  b.scales_l[3] = 0xe0;
  b.scales_h = static_cast<uint16_t>(2 | (1 << 14));
  b.qs[0] = 0x0f;        // element 0: 113, element 16: -127
  b.qs[16 * 7] = 0x08;   // element 224: 1, element 240: -127
  const auto y = dequantize(DType::IQ4_XS, &b, 256);
  EXPECT_EQ(y[0], 113.0f);
  EXPECT_EQ(y[16], -127.0f);
  EXPECT_EQ(y[224], -2.0f);
  EXPECT_EQ(y[240], 254.0f);
  EXPECT_EQ(y[100], 4064.0f);  // group 3: s = 0, so -32 times code 0 (-127)
}

TEST(QuantCodebook, Mxfp4IsE2m1UnderAPowerOfTwo) {
  BlockMXFP4 b{};
  b.e = 128;       // 2^1
  b.qs[0] = 0x97;  // element 0: 6 (code 7), element 16: -0.5 (code 9)
  b.qs[1] = 0x2a;  // element 1: -1 (code 10), element 17: 1 (code 2)
  const auto y = dequantize(DType::MXFP4, &b, 32);
  EXPECT_EQ(y[0], 12.0f);
  EXPECT_EQ(y[16], -1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[17], 2.0f);
  b.e = 0;  // the smallest scale, 2^-127, is a subnormal float
  EXPECT_EQ(dequantize(DType::MXFP4, &b, 32)[0], 6.0f * 0x1p-127f);
}

TEST(QuantCodebook, Tq2_0PacksFourTritsPerByte) {
  BlockTQ2_0 b{};
  b.d = fp32_to_fp16(2.0f);
  b.qs[33] = 0b00011000;  // elements 129, 161, 193, 225: t = 0, 2, 1, 0
  const auto y = dequantize(DType::TQ2_0, &b, 256);
  EXPECT_EQ(y[129], -2.0f);
  EXPECT_EQ(y[161], 2.0f);
  EXPECT_EQ(y[193], 0.0f);
  EXPECT_EQ(y[225], -2.0f);
}

TEST(QuantCodebook, Tq1_0PacksFiveTritsAsABase3Fraction) {
  BlockTQ1_0 b{};
  std::memset(b.qs, 0, sizeof b.qs);
  b.d = fp32_to_fp16(1.0f);
  // Trits 2, 0, 1, 2, 1 (most significant first): 2*81 + 9 + 2*3 + 1 = 178, as a fraction
  // of 243 rounded up onto 256: (178 * 256 + 242) / 243 = 188.
  b.qs[5] = 188;    // elements 5, 37, 69, 101, 133
  b.qs[40] = 188;   // elements 168, 184, 200, 216, 232
  b.qh[2] = 188;    // elements 242, 246, 250, 254 (four trits: the fifth is dropped)
  const auto y = dequantize(DType::TQ1_0, &b, 256);
  const float want[5] = {1, -1, 0, 1, 0};
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(y[5 + 32 * k], want[k]) << k;
    EXPECT_EQ(y[168 + 16 * k], want[k]) << k;
    if (k < 4) {
      EXPECT_EQ(y[242 + 4 * k], want[k]) << k;
    }
  }
  EXPECT_EQ(y[0], -1.0f);  // a zero byte is all trits 0: x = -d
}

TEST(QuantCodebook, Iq2xxsPicksGridRowsSignsAndAGroupScale) {
  BlockIQ2_XXS b{};
  b.d = fp32_to_fp16(1.0f);
  // Group 0: rows 1, 0, 0, 0 (row 1 is 43 then seven 8s); sign index 1 for the first 8
  // values (bit 0, plus bit 7 for an even count of minus signs); scale 3: (0.5 + 3) / 4.
  const uint32_t rows = 1, signs_scale = (3u << 28) | 1u;
  std::memcpy(b.qs, &rows, 4);
  std::memcpy(b.qs + 4, &signs_scale, 4);
  const auto y = dequantize(DType::IQ2_XXS, &b, 256);
  EXPECT_EQ(y[0], -0.875f * 43);
  EXPECT_EQ(y[1], 0.875f * 8);
  EXPECT_EQ(y[7], -0.875f * 8);
  EXPECT_EQ(y[8], 0.875f * 8);
  EXPECT_EQ(y[32], 0.125f * 8);  // group 1: all zero bits, scale (0.5 + 0) / 4
}

TEST(QuantCodebook, Iq1mSpreadsItsF16ScaleOverTheScaleWords) {
  BlockIQ1_M b{};
  // d = 1.0 (0x3c00): nibbles 0, 0, 0xc, 0x3 on top of the four words; word 0's first
  // 3-bit field is scale 1 for codes 0 and 1: 2 * 1 + 1 = 3.
  const uint16_t words[4] = {1, 0, 0xc000, 0x3000};
  std::memcpy(b.scales, words, sizeof words);
  b.qh[0] = 0x80;  // code 0: shift +delta; code 1: its nibble's bit 3, shift -delta
  const auto y = dequantize(DType::IQ1_M, &b, 256);
  EXPECT_EQ(y[0], 3 * (-1 + 0.125f));  // grid row 0 is all -1
  EXPECT_EQ(y[8], 3 * (-1 - 0.125f));
  EXPECT_EQ(y[16], 1 * (-1 + 0.125f));  // codes 2, 3: scale field 1 of word 0 is 0
}

TEST(QuantCodebook, Nvfp4IsE2m1UnderE4m3SubBlockScales) {
  BlockNVFP4 b{};
  b.d[1] = 0x38;   // 2^0, halved against the doubled E2M1 table: 0.5
  b.qs[8] = 0x97;  // element 16: 6 (code 7), element 24: -0.5 (code 9)
  b.d[2] = 0x7f;   // E4M3's NaN reads as zero
  b.qs[16] = 0x07;
  b.d[3] = 0x01;   // the smallest subnormal, 2^-9
  b.qs[24] = 0x07;
  const auto y = dequantize(DType::NVFP4, &b, 64);
  EXPECT_EQ(y[16], 6.0f);
  EXPECT_EQ(y[24], -0.5f);
  EXPECT_EQ(y[32], 0.0f);
  EXPECT_EQ(y[48], 6.0f * 0x1p-9f);
}

TEST(QuantCodebook, TernaryAndMxfp4QuantizersRoundTripRepresentableData) {
  std::vector<float> ternary(512);
  for (size_t i = 0; i < ternary.size(); ++i) ternary[i] = 0.75f * static_cast<float>(int(i * 7 % 3) - 1);
  for (DType type : {DType::TQ1_0, DType::TQ2_0}) {
    std::vector<uint8_t> q(row_size(type, 512));
    quantize_row(type, ternary.data(), q.data(), 512);
    EXPECT_EQ(dequantize(type, q.data(), 512), ternary) << dtype_name(type);
  }
  // E2M1 values under 2^-3, the block's largest magnitude 6 * 2^-3 choosing that scale.
  const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  std::vector<float> fp4(64);
  for (size_t i = 0; i < fp4.size(); ++i) fp4[i] = (i % 2 ? -1.0f : 1.0f) * e2m1[(i * 5 + 7) % 8] * 0.125f;
  fp4[3] = fp4[40] = -6 * 0.125f;
  std::vector<uint8_t> q(row_size(DType::MXFP4, 64));
  quantize_row(DType::MXFP4, fp4.data(), q.data(), 64);
  EXPECT_EQ(dequantize(DType::MXFP4, q.data(), 64), fp4);
}

}  // namespace
}  // namespace ridge
