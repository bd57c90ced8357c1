// The AVX2 dot product and the scalar reference agree with a double sum for every
// length class (vector body, 8-wide tail, scalar tail) and any alignment.
#include "kernels/ops/dot.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace ridge::kernels {
namespace {

using testing::random_floats;

TEST(Dot, ScalarAndAvx2MatchDoubleSumForAllLengthsAndOffsets) {
  const auto a = random_floats(1200, 1);
  const auto b = random_floats(1200, 2);
  for (int64_t n : {0, 1, 3, 7, 8, 9, 15, 16, 31, 32, 33, 40, 63, 64, 65, 100, 255, 1031}) {
    for (int64_t offset : {0, 1, 3}) {
      double expected = 0, magnitude = 0;
      for (int64_t i = 0; i < n; ++i) {
        expected += static_cast<double>(a[offset + i]) * b[offset + i];
        magnitude += std::fabs(static_cast<double>(a[offset + i]) * b[offset + i]);
      }
      // A float sum of n products errs by at most ~n * 2^-24 * sum |a_i b_i|.
      const double tolerance = 1e-6 + 2.0 * n * 6e-8 * magnitude;
      EXPECT_NEAR(dot_f32_scalar(a.data() + offset, b.data() + offset, n), expected, tolerance) << "n=" << n;
      if (cpu_supports(Isa::kAvx2)) {
        EXPECT_NEAR(dot_f32_avx2(a.data() + offset, b.data() + offset, n), expected, tolerance) << "n=" << n;
      }
      EXPECT_NEAR(dot_f32(a.data() + offset, b.data() + offset, n), expected, tolerance) << "n=" << n;
    }
  }
}

TEST(Dot, ExactOnSmallIntegers) {
  // Integer products and sums below 2^24 are exact in float, whatever the order.
  std::vector<float> a(77), b(77);
  double expected = 0;
  for (int i = 0; i < 77; ++i) {
    a[i] = static_cast<float>(i % 13 - 6);
    b[i] = static_cast<float>(i % 7 - 3);
    expected += a[i] * b[i];
  }
  EXPECT_EQ(dot_f32_scalar(a.data(), b.data(), 77), expected);
  EXPECT_EQ(dot_f32(a.data(), b.data(), 77), expected);
}

TEST(Dot, Axpy) {
  const auto x = random_floats(37, 3);
  auto y = random_floats(37, 4);
  const auto y0 = y;
  axpy_f32(0.5f, x.data(), y.data(), 37);
  for (int i = 0; i < 37; ++i) EXPECT_FLOAT_EQ(y[i], y0[i] + 0.5f * x[i]);
}

}  // namespace
}  // namespace ridge::kernels
