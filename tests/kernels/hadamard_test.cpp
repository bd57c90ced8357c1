#include "kernels/ops/hadamard.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "test_util.h"

namespace ridge::kernels {
namespace {

std::vector<float> random_values(int64_t n, uint32_t seed) { return testing::random_floats(static_cast<size_t>(n), seed); }

TEST(Hadamard, MatchesSylvestersMatrixInDouble) {
  for (int64_t block : {64, 128, 256}) {
    SCOPED_TRACE(block);
    const std::vector<float> x = random_values(3 * block, 1);
    std::vector<float> y = x;
    hadamard_rotate(y.data(), static_cast<int64_t>(y.size()), block);
    for (int64_t b = 0; b < 3; ++b) {
      for (int64_t i = 0; i < block; ++i) {
        double want = 0;
        for (int64_t j = 0; j < block; ++j)
          want += (std::popcount(static_cast<uint64_t>(i & j)) % 2 ? -1.0 : 1.0) * x[b * block + j];
        want /= std::sqrt(static_cast<double>(block));
        EXPECT_NEAR(y[b * block + i], want, 1e-5) << "block " << b << ", value " << i;
      }
    }
  }
}

TEST(Hadamard, TwiceIsTheIdentityAndDotProductsAreKept) {
  const std::vector<float> q = random_values(256, 2), k = random_values(256, 3);
  std::vector<float> hq = q, hk = k;
  hadamard_rotate(hq.data(), 256, 128);
  hadamard_rotate(hk.data(), 256, 128);
  double dot = 0, rotated_dot = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    dot += double{q[i]} * k[i];
    rotated_dot += double{hq[i]} * hk[i];
  }
  EXPECT_NEAR(rotated_dot, dot, 1e-4);
  hadamard_rotate(hq.data(), 256, 128);
  for (size_t i = 0; i < q.size(); ++i) EXPECT_NEAR(hq[i], q[i], 1e-5);
}

TEST(Hadamard, SpreadsAnOutlierChannelOverTheBlock) {
  // One channel 100x the others: after the rotation no value holds more than a few times
  // the block's RMS, which is what makes an absmax-scaled block keep the small channels.
  std::vector<float> x = random_values(64, 4);
  x[17] = 100.0f;
  hadamard_rotate(x.data(), 64, 64);
  double sum_sq = 0, max_abs = 0;
  for (float v : x) {
    sum_sq += double{v} * v;
    max_abs = std::max(max_abs, std::fabs(double{v}));
  }
  EXPECT_LT(max_abs / std::sqrt(sum_sq / 64), 2.0);
}

TEST(Hadamard, RotationSizesFollowTheHeadSize) {
  EXPECT_EQ(kv_rotation(true, 64).k, 64);
  EXPECT_EQ(kv_rotation(true, 128).k, 128);
  EXPECT_EQ(kv_rotation(true, 256).k, 256);
  EXPECT_EQ(kv_rotation(true, 192).k, 64);
  EXPECT_EQ(kv_rotation(true, 256).v, 64);
  EXPECT_EQ(kv_rotation(true, 96).k, 0);   // not a multiple of 64: no rotation
  EXPECT_EQ(kv_rotation(false, 128).k, 0);  // f16/bf16/f32 caches keep values as they are
  EXPECT_EQ(kv_rotation(false, 128).v, 0);
}

}  // namespace
}  // namespace ridge::kernels
