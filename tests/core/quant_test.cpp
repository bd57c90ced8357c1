// Quantize/dequantize references: round-trip error on Gaussian data within what each
// format's step size allows, exact round trips where a format can represent the data,
// idempotence where the format guarantees it, degenerate rows, and the checked entry
// points. (Bit-exactness against GGUF itself is tests/python/test_quant_reference.py.)
#include "core/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/quant_blocks.h"

namespace ridge {
namespace {

std::vector<float> gaussian(int64_t n, uint32_t seed, float mean = 0.0f, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, sigma);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = dist(rng);
  return x;
}

std::vector<uint8_t> quantize(DType type, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_size(type, static_cast<int64_t>(x.size())));
  quantize_row(type, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

std::vector<float> dequantize(DType type, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(type, q.data(), y.data(), n);
  return y;
}

std::vector<float> round_trip(DType type, const std::vector<float>& x) {
  return dequantize(type, quantize(type, x), static_cast<int64_t>(x.size()));
}

double relative_rmse(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
    ref += double(x[i]) * x[i];
  }
  return std::sqrt(err / ref);
}

struct ErrorBound {
  DType type;
  double max_relative_rmse;
};

// Bounds on RMSE / RMS for N(0,1) data. Uniform rounding with step s has RMS error
// s/sqrt(12); s is the block's max |x| over the number of levels on each side (Q8_0:
// ~2.2/127 -> 0.50%, Q8_K over 256 values: ~2.9/127 -> 0.66%, Q6_K: ~2/32 -> 1.7%,
// Q5_0: ~2.2/16 -> 4.0%, Q4_0: ~2.2/8 -> 7.9%). Min/max formats (Q4_1, Q5_1) spread the
// levels over the range instead, and the K-quants search scale and min per group, so they
// do somewhat better than their symmetric siblings; Q3_K and Q2_K have 8 and 4 levels.
// Measured at 65536 values: f16 0.021%, bf16 0.17%, q8_0 0.54%, q8_K 0.69%, q6_K 1.77%,
// q5_0 4.27%, q5_1 3.79%, q5_K 3.62%, q4_0 8.59%, q4_1 7.81%, q4_K 7.15%, q3_K 15.1%,
// q2_K 29.8%. Bounds leave ~20% headroom for other seeds.
const ErrorBound kBounds[] = {
    {DType::F32, 0.0},      {DType::F16, 0.00025},  {DType::BF16, 0.002},
    {DType::Q8_0, 0.0065},  {DType::Q8_1, 0.0065},  {DType::Q8_K, 0.0085},
    {DType::Q6_K, 0.021},   {DType::Q5_0, 0.051},   {DType::Q5_1, 0.046},
    {DType::Q5_K, 0.044},   {DType::Q4_0, 0.103},   {DType::Q4_1, 0.094},
    {DType::Q4_K, 0.086},   {DType::Q3_K, 0.18},    {DType::Q2_K, 0.36},
};

class QuantRoundTrip : public testing::TestWithParam<ErrorBound> {};

TEST_P(QuantRoundTrip, GaussianErrorWithinFormatBound) {
  const ErrorBound bound = GetParam();
  for (uint32_t seed : {1u, 2u, 3u}) {
    const std::vector<float> x = gaussian(256 * 64, seed);
    const double err = relative_rmse(x, round_trip(bound.type, x));
    EXPECT_LE(err, bound.max_relative_rmse) << dtype_name(bound.type) << " seed " << seed;
  }
}

TEST_P(QuantRoundTrip, ErrorScalesWithTheData) {
  // Block scales are per block, so the relative error must not depend on the magnitude
  // (within f16 range of the scales).
  const ErrorBound bound = GetParam();
  for (float sigma : {1e-3f, 40.0f}) {
    const std::vector<float> x = gaussian(256 * 16, 11, 0.0f, sigma);
    EXPECT_LE(relative_rmse(x, round_trip(bound.type, x)), bound.max_relative_rmse * 1.1)
        << dtype_name(bound.type) << " sigma " << sigma;
  }
}

TEST_P(QuantRoundTrip, ZeroRowsStayZero) {
  const DType type = GetParam().type;
  const std::vector<float> x(256 * 3, 0.0f);
  for (float v : round_trip(type, x)) ASSERT_EQ(v, 0.0f) << dtype_name(type);
}

TEST_P(QuantRoundTrip, ConstantRowsStayClose) {
  const DType type = GetParam().type;
  for (float c : {0.75f, -3.0f, 1e-3f}) {
    const std::vector<float> x(256 * 2, c);
    for (float v : round_trip(type, x))
      ASSERT_NEAR(v, c, std::fabs(c) * std::max(0.01, 2 * GetParam().max_relative_rmse))
          << dtype_name(type) << " c=" << c;
  }
}

TEST_P(QuantRoundTrip, BlocksAreIndependentForOddBlockCounts) {
  // Rows of 1, 3 and 7 blocks quantized alone give the same bytes as inside one long row.
  const DType type = GetParam().type;
  const int64_t block = type_traits(type).block_size;
  const std::vector<float> x = gaussian(block * 11, 5);
  const std::vector<uint8_t> whole = quantize(type, x);
  int64_t offset = 0;
  for (int64_t blocks : {1, 3, 7}) {
    std::vector<float> part(x.begin() + offset, x.begin() + offset + blocks * block);
    const std::vector<uint8_t> q = quantize(type, part);
    const size_t at = row_size(type, offset);
    ASSERT_EQ(0, std::memcmp(q.data(), whole.data() + at, q.size())) << dtype_name(type);
    offset += blocks * block;
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, QuantRoundTrip, testing::ValuesIn(kBounds),
                         [](const testing::TestParamInfo<ErrorBound>& info) {
                           return std::string(dtype_name(info.param.type));
                         });

TEST(QuantRoundTrip, KQuantsBeatTheirLegacySiblings) {
  // The point of the K-quant scale search: less error at similar bits per weight.
  const std::vector<float> x = gaussian(256 * 64, 9);
  EXPECT_LT(relative_rmse(x, round_trip(DType::Q4_K, x)),
            relative_rmse(x, round_trip(DType::Q4_0, x)));
  EXPECT_LT(relative_rmse(x, round_trip(DType::Q5_K, x)),
            relative_rmse(x, round_trip(DType::Q5_0, x)));
  EXPECT_LT(relative_rmse(x, round_trip(DType::Q6_K, x)),
            relative_rmse(x, round_trip(DType::Q5_K, x)));
}

TEST(QuantRoundTrip, Q8_0ErrorIsAtMostHalfAStep) {
  // Each value rounds to the nearest multiple of d = amax/127; storing d as f16 moves
  // the grid by at most 127 * d * 2^-11.
  const std::vector<float> x = gaussian(32 * 256, 4);
  const std::vector<float> y = round_trip(DType::Q8_0, x);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float step = amax / 127;
    for (int j = 0; j < 32; ++j)
      ASSERT_LE(std::fabs(y[b * 32 + j] - x[b * 32 + j]), step * (0.5f + 127.0f / 2048.0f));
  }
}

// Data the format represents exactly comes back exactly: integer codes times a
// power-of-two step, with the extreme code present so the fitted scale is that step.
TEST(QuantExact, RepresentableDataRoundTripsExactly) {
  std::mt19937 rng(3);
  struct Case {
    DType type;
    int lo, hi;  // integer range of the data; the block's extreme value is forced in
    int extreme;
  };
  for (const Case& c : {Case{DType::Q8_0, -127, 127, 127}, Case{DType::Q8_1, -127, 127, -127},
                        Case{DType::Q8_K, -127, 127, -127}, Case{DType::Q4_0, -7, 7, -8},
                        Case{DType::Q5_0, -15, 15, -16}, Case{DType::Q4_1, 0, 15, 15},
                        Case{DType::Q5_1, -31, 0, -31}}) {
    const int64_t block = type_traits(c.type).block_size;
    std::uniform_int_distribution<int> dist(c.lo, c.hi);
    std::vector<float> x(static_cast<size_t>(block * 4));
    for (float& v : x) v = static_cast<float>(dist(rng)) * 0.25f;
    for (int64_t b = 0; b < 4; ++b) x[b * block + 5] = static_cast<float>(c.extreme) * 0.25f;
    if (c.type == DType::Q4_1 || c.type == DType::Q5_1)  // min/max formats need both ends
      for (int64_t b = 0; b < 4; ++b) x[b * block + 9] = 0.0f;
    EXPECT_EQ(round_trip(c.type, x), x) << dtype_name(c.type);
  }
}

TEST(QuantExact, QuantizingDequantizedDataIsIdempotent) {
  // The symmetric formats map the block's extreme to the extreme code, so dequantized
  // data has the same extreme and the same scale, and every value lands on its code.
  // Min/max formats do too when |min| is not much larger than the range (zero-centred
  // data here). Q8_K keeps its values but not always its bytes: its float scale may move
  // by an ulp, and when -max also rounds to code 127 the sign of d and the codes can flip.
  const std::vector<float> x = gaussian(256 * 32, 8);
  for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q4_1, DType::Q5_1}) {
    const std::vector<uint8_t> q = quantize(type, x);
    const std::vector<float> y = dequantize(type, q, static_cast<int64_t>(x.size()));
    EXPECT_EQ(quantize(type, y), q) << dtype_name(type);
  }
  const std::vector<float> y = round_trip(DType::Q8_K, x);
  const std::vector<float> y2 = round_trip(DType::Q8_K, y);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(y2[i], y[i], std::fabs(y[i]) * 1e-6f) << "element " << i;
}

TEST(QuantExact, Q8KBlockSumsAreSumsOfCodes) {
  const std::vector<float> x = gaussian(256 * 4, 12);
  const std::vector<uint8_t> q = quantize(DType::Q8_K, x);
  const auto* blocks = reinterpret_cast<const BlockQ8_K*>(q.data());
  for (int b = 0; b < 4; ++b)
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += blocks[b].qs[16 * g + l];
      EXPECT_EQ(blocks[b].bsums[g], sum);
    }
}

TEST(QuantLayout, HandBuiltBlocksDecodeAsGgufDefines) {
  // Q4_0: element j in the low nibble of qs[j], element j+16 in the high nibble.
  BlockQ4_0 q4{};
  q4.d = fp32_to_fp16(0.5f);
  q4.qs[0] = 0x9f;  // element 0: 15-8 = 7, element 16: 9-8 = 1
  q4.qs[15] = 0x08;  // element 15: 0, element 31: -8
  float y[256];
  dequantize_row_q4_0(&q4, y, 32);
  EXPECT_EQ(y[0], 3.5f);
  EXPECT_EQ(y[16], 0.5f);
  EXPECT_EQ(y[15], 0.0f);
  EXPECT_EQ(y[31], -4.0f);
  EXPECT_EQ(y[1], -4.0f);  // code 0 is -8

  // Q5_0: bit 4 of element j is bit j of qh (little-endian).
  BlockQ5_0 q5{};
  q5.d = fp32_to_fp16(1.0f);
  q5.qh[3] = 0x80;  // element 31 gets bit 4
  q5.qs[15] = 0xf0;  // element 31 low bits 15
  dequantize_row_q5_0(&q5, y, 32);
  EXPECT_EQ(y[31], 15.0f);  // 31 - 16
  EXPECT_EQ(y[15], -16.0f);

  // Q6_K: element 200 = 128 + 64 + 8 is half 1, quarter 2, lane 8: high nibble of
  // ql[64+8], bit pair 2 of qh[32+8], scale of group 12.
  BlockQ6_K q6{};
  q6.d = fp32_to_fp16(0.25f);
  q6.scales[12] = -3;
  q6.ql[72] = 0x50;          // low bits 5
  q6.qh[40] = 2 << 4;        // high bits 2 -> code 37 -> q = 5
  dequantize_row_q6_k(&q6, y, 256);
  EXPECT_EQ(y[200], 0.25f * -3 * 5);

  // Q4_K: group 5's scale is the low nibble of byte 9 plus the top bits of byte 1.
  BlockQ4_K q4k{};
  q4k.d = fp32_to_fp16(1.0f);
  q4k.dmin = fp32_to_fp16(0.5f);
  q4k.scales[9] = 0x32;         // group 5: scale low 2, min low 3
  q4k.scales[1] = 0x40;         // scale bit 4 -> 18
  q4k.scales[5] = 0x80;         // min bit 5 -> 35
  q4k.qs[64 + 7] = 0x40;        // element 160+7 is group 5 (high nibble of chunk 2): 4
  dequantize_row_q4_k(&q4k, y, 256);
  EXPECT_EQ(y[167], 18.0f * 4 - 0.5f * 35);
}

TEST(QuantRow, CheckedEntryPointsNameTheType) {
  std::vector<float> x(100);
  std::vector<uint8_t> q(1024);
  try {
    quantize_row(DType::Q4_K, x.data(), q.data(), 100);
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q4_K"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("100"), std::string::npos) << e.what();
  }
  try {
    dequantize_row(DType::Q1_0, q.data(), x.data(), 128);
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q1_0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(quantize_row(DType::IQ4_NL, x.data(), q.data(), 32), Error);
  EXPECT_THROW(dequantize_row(static_cast<DType>(4), q.data(), x.data(), 32), Error);
  EXPECT_THROW(dequantize_row(DType::Q8_0, q.data(), x.data(), -32), Error);
  EXPECT_NO_THROW(dequantize_row(DType::Q8_0, q.data(), x.data(), 0));
}

}  // namespace
}  // namespace ridge
