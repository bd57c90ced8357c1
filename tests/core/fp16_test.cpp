// f16 and bf16 scalar conversions: known values, every 16-bit pattern, and (where the
// CPU has it) agreement with the hardware F16C conversion on non-NaN inputs.
#include "core/fp16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace ridge {
namespace {

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
float from_bits(uint32_t u) { return std::bit_cast<float>(u); }

TEST(Fp16, KnownValues) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_fp16(0.1f), 0x2e66);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(65519.99f), 0x7bff);  // just under the tie: stays finite
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);   // the tie rounds to even: inf
  EXPECT_EQ(fp32_to_fp16(-1e9f), 0xfc00);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // half of it: tie to even
  EXPECT_EQ(fp32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: tie to even 2
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(from_bits(0x3f801000)), 0x3c00);  // 1 + 2^-11: tie, even down
  EXPECT_EQ(fp32_to_fp16(from_bits(0x3f803000)), 0x3c02);  // 1 + 3*2^-11: tie, even up

  EXPECT_EQ(fp16_to_fp32(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_fp32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(bits(fp16_to_fp32(0x8000)), 0x80000000u);
  EXPECT_EQ(fp16_to_fp32(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7e00)));
}

TEST(Fp16, NanPayloadsSurviveBothWays) {
  EXPECT_EQ(bits(fp16_to_fp32(0x7c01)), 0x7f802000u);  // signalling stays signalling
  EXPECT_EQ(fp32_to_fp16(from_bits(0x7fc00000)), 0x7e00);
  EXPECT_EQ(fp32_to_fp16(from_bits(0xff812345)), 0xfc09);
  EXPECT_EQ(fp32_to_fp16(from_bits(0x7f800001)), 0x7c01);  // payload lost: still NaN
}

TEST(Fp16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h)
    ASSERT_EQ(fp32_to_fp16(fp16_to_fp32(static_cast<uint16_t>(h))), h) << std::hex << h;
}

TEST(Fp16, NarrowingIsMonotoneAndNearest) {
  // Between two neighbouring halves every float goes to the nearer one.
  for (uint32_t h = 0; h < 0x7bff; h += 3) {
    const float lo = fp16_to_fp32(static_cast<uint16_t>(h));
    const float hi = fp16_to_fp32(static_cast<uint16_t>(h + 1));
    const float mid = lo + (hi - lo) / 2;  // exact: halves have 11 significant bits
    EXPECT_EQ(fp32_to_fp16(std::nextafter(mid, lo)), h);
    EXPECT_EQ(fp32_to_fp16(std::nextafter(mid, hi)), h + 1);
    EXPECT_EQ(fp32_to_fp16(mid), (h & 1) ? h + 1 : h);  // ties to even
  }
}

#if defined(__F16C__)
TEST(Fp16, MatchesHardwareOnEveryNonNanPattern) {
  // A sweep of float bit patterns with a stride coprime to every field boundary.
  for (uint64_t u = 0; u < (1ull << 32); u += 4099) {
    const float f = from_bits(static_cast<uint32_t>(u));
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_fp16(f), _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)) << std::hex << u;
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) continue;  // NaN: hardware quiets
    ASSERT_EQ(bits(fp16_to_fp32(static_cast<uint16_t>(h))),
              bits(_cvtsh_ss(static_cast<uint16_t>(h))))
        << std::hex << h;
  }
}
#endif

TEST(Bf16, RoundsToNearestEvenAndQuietsNan) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3f808000)), 0x3f80);  // tie, even down
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3f818000)), 0x3f82);  // tie, even up
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3f808001)), 0x3f81);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x7f7fffff)), 0x7f80);  // largest float rounds to inf
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00000001)), 0x0000);  // subnormals are kept, not flushed
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00018000)), 0x0002);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x7f800001)), 0x7fc0);  // signalling NaN: quieted
  EXPECT_EQ(fp32_to_bf16(from_bits(0xffffffff)), 0xffff);  // NaN never rounds into inf
  EXPECT_EQ(bf16_to_fp32(0xc040), -3.0f);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const bool nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
    const uint16_t expected = nan ? static_cast<uint16_t>(h | 0x40) : static_cast<uint16_t>(h);
    ASSERT_EQ(fp32_to_bf16(bf16_to_fp32(static_cast<uint16_t>(h))), expected) << std::hex << h;
  }
}

}  // namespace
}  // namespace ridge
