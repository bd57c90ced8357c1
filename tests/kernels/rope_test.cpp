// RoPE in both layouts against the direct formula in double, partial rotary dims,
// linear scaling, YaRN, and identity at position 0.
#include "kernels/ops/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "test_util.h"

namespace ridge::kernels {
namespace {

using testing::close;
using testing::random_floats;

// Independent formula: rotate pair (a, b) by pos * scale * base^(-2i/n_rot).
void rotate_direct(std::vector<double>& head, RopeMode mode, int64_t n_rot, double pos, double base, double scale) {
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double theta = pos * scale / std::pow(base, 2.0 * i / n_rot);
    const int64_t a = mode == RopeMode::Norm ? 2 * i : i;
    const int64_t b = mode == RopeMode::Norm ? 2 * i + 1 : i + n_rot / 2;
    const double x0 = head[a], x1 = head[b];
    head[a] = x0 * std::cos(theta) - x1 * std::sin(theta);
    head[b] = x0 * std::sin(theta) + x1 * std::cos(theta);
  }
}

struct RopeCase {
  RopeMode mode;
  int64_t d_head, n_rot;
  float base, scale;
};

TEST(Rope, BothModesMatchDirectFormula) {
  const std::vector<RopeCase> cases = {
      {RopeMode::Norm, 64, 64, 10000.0f, 1.0f},      // llama
      {RopeMode::Neox, 64, 64, 1000000.0f, 1.0f},    // Qwen2
      {RopeMode::Neox, 256, 256, 1000000.0f, 0.125f},  // Gemma 3 global layer, factor 8
      {RopeMode::Norm, 48, 16, 10000.0f, 1.0f},      // partial rotary dims
      {RopeMode::Neox, 48, 32, 500000.0f, 0.5f},
  };
  const int64_t n_tokens = 5, n_head = 3;
  const std::vector<int32_t> pos = {0, 1, 17, 4095, 32767};
  for (const RopeCase& c : cases) {
    const auto x0 = random_floats(n_tokens * n_head * c.d_head, 11);
    auto got = x0;
    auto ref = x0;
    const RopeParams params{c.mode, c.n_rot, c.base, c.scale};
    rope(got.data(), pos.data(), n_tokens, n_head, c.d_head, params);
    rope_reference(ref.data(), pos.data(), n_tokens, n_head, c.d_head, params);
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t h = 0; h < n_head; ++h) {
        const size_t at = static_cast<size_t>((t * n_head + h) * c.d_head);
        std::vector<double> head(x0.begin() + at, x0.begin() + at + c.d_head);
        rotate_direct(head, c.mode, c.n_rot, pos[t], c.base, c.scale);
        for (int64_t d = 0; d < c.d_head; ++d) {
          ASSERT_TRUE(close(got[at + d], head[d]))
              << "mode " << int(c.mode) << " pos " << pos[t] << " dim " << d << ": " << got[at + d] << " vs " << head[d];
          ASSERT_TRUE(close(ref[at + d], head[d])) << "reference, dim " << d;
          if (d >= c.n_rot) {
            ASSERT_EQ(got[at + d], x0[at + d]) << "dims past n_rot must pass through";
          }
        }
      }
  }
}

TEST(Rope, PositionZeroIsIdentity) {
  for (RopeMode mode : {RopeMode::Norm, RopeMode::Neox}) {
    const auto x0 = random_floats(2 * 4 * 32, 12);
    auto x = x0;
    const int32_t pos[2] = {0, 0};
    rope(x.data(), pos, 2, 4, 32, RopeParams{mode, 32, 10000.0f, 1.0f});
    EXPECT_EQ(x, x0);
  }
}

TEST(Rope, ModesDifferAndPreserveNorm) {
  const auto x0 = random_floats(64, 13);
  auto norm = x0, neox = x0;
  const int32_t pos[1] = {7};
  rope(norm.data(), pos, 1, 1, 64, RopeParams{RopeMode::Norm, 64, 10000.0f, 1.0f});
  rope(neox.data(), pos, 1, 1, 64, RopeParams{RopeMode::Neox, 64, 10000.0f, 1.0f});
  EXPECT_NE(norm, neox);
  double n0 = 0, n1 = 0;
  for (int i = 0; i < 64; ++i) {
    n0 += double(x0[i]) * x0[i];
    n1 += double(neox[i]) * neox[i];
  }
  EXPECT_NEAR(n1, n0, 1e-4 * n0);  // a rotation keeps the length
}

TEST(Rope, TokenStrideSkipsInterleavedData) {
  // q heads of 2 tokens inside a wider row (as in a fused QKV buffer): the rest stays.
  const int64_t stride = 3 * 16 + 5;
  const auto x0 = random_floats(2 * stride, 14);
  auto x = x0, dense = std::vector<float>();
  for (int t = 0; t < 2; ++t) dense.insert(dense.end(), x0.begin() + t * stride, x0.begin() + t * stride + 48);
  const int32_t pos[2] = {3, 9};
  const RopeParams p{RopeMode::Neox, 16, 10000.0f, 1.0f};
  rope(x.data(), pos, 2, 3, 16, p, stride);
  rope(dense.data(), pos, 2, 3, 16, p);
  for (int t = 0; t < 2; ++t) {
    for (int i = 0; i < 48; ++i) EXPECT_EQ(x[t * stride + i], dense[t * 48 + i]);
    for (int i = 48; i < stride; ++i) EXPECT_EQ(x[t * stride + i], x0[t * stride + i]);
  }
}

// The two-step form the model uses (one table per step, applied to q and k of every
// layer) must give rope's bits in both layouts, with partial dims and a token stride.
TEST(Rope, TableThenApplyEqualsRope) {
  const std::vector<int32_t> pos = {0, 1, 17, 4095, 32767};
  const int64_t n_tokens = 5, n_head = 3;
  for (const RopeCase& c : {RopeCase{RopeMode::Norm, 64, 64, 10000.0f, 1.0f},
                            RopeCase{RopeMode::Neox, 256, 256, 1000000.0f, 0.125f},
                            RopeCase{RopeMode::Norm, 48, 16, 10000.0f, 1.0f},
                            RopeCase{RopeMode::Neox, 48, 32, 500000.0f, 0.5f}}) {
    const RopeParams params{c.mode, c.n_rot, c.base, c.scale};
    for (int64_t stride : {int64_t{0}, n_head * c.d_head + 7}) {
      const int64_t row = stride == 0 ? n_head * c.d_head : stride;
      const auto x0 = random_floats(n_tokens * row, 15);
      auto direct = x0, two_step = x0;
      rope(direct.data(), pos.data(), n_tokens, n_head, c.d_head, params, stride);
      std::vector<float> table(rope_table_floats(n_tokens, params), -1.0f);
      rope_table(pos.data(), n_tokens, params, table.data());
      rope_apply(two_step.data(), table.data(), n_tokens, n_head, c.d_head, params, stride);
      EXPECT_EQ(two_step, direct) << "mode " << int(c.mode) << " n_rot " << c.n_rot << " stride " << stride;
    }
  }
}

// YaRN on Qwen2.5's shape (128 dims, base 1e6, factor 4 over 32768 positions): ggml's ramp
// bounds, and the kernel (fast table path and direct rope) equal to the reference formula.
TEST(Rope, YarnRampAndAttentionFactor) {
  float dims[2];
  yarn_corr_dims(128, 32768, 1000000.0f, 32.0f, 1.0f, dims);
  // 128 ln(32768 / (32 * 2 pi)) / (2 ln 1e6) = 23.6 (floor 23); with 1 rotation 39.65 (ceil 40).
  EXPECT_EQ(dims[0], 23.0f);
  EXPECT_EQ(dims[1], 40.0f);
  RopeParams p{RopeMode::Neox, 128, 1000000.0f, 0.25f};
  p.yarn = true;
  p.yarn_low = dims[0];
  p.yarn_high = dims[1];
  p.mscale = 1.0f + 0.1f * std::log(4.0f);
  const int64_t n_tokens = 4, n_head = 2;
  const std::vector<int32_t> pos = {0, 5, 40000, 131071};
  const auto x0 = random_floats(n_tokens * n_head * 128, 7);
  auto got = x0, ref = x0, tabled = x0;
  rope(got.data(), pos.data(), n_tokens, n_head, 128, p);
  rope_reference(ref.data(), pos.data(), n_tokens, n_head, 128, p);
  std::vector<float> table(rope_table_floats(n_tokens, p));
  rope_table(pos.data(), n_tokens, p, table.data());
  rope_apply(tabled.data(), table.data(), n_tokens, n_head, 128, p);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(close(got[i], ref[i])) << i << ": " << got[i] << " vs " << ref[i];
    ASSERT_EQ(got[i], tabled[i]) << i;
  }
  // Position 0 is no rotation, only the attention factor.
  for (int64_t d = 0; d < 128; ++d) EXPECT_FLOAT_EQ(got[d], p.mscale * x0[d]);
  // The highest-frequency pair (i < low) turns as without scaling at all.
  const double theta = 5.0;  // pair 0 at position 5: base^0 = 1
  const size_t at = static_cast<size_t>(1 * n_head * 128);
  EXPECT_NEAR(got[at], p.mscale * (x0[at] * std::cos(theta) - x0[at + 64] * std::sin(theta)), 1e-5);
}

TEST(Rope, RejectsBadRotaryDims) {
  std::vector<float> x(64);
  const int32_t pos[1] = {1};
  EXPECT_THROW(rope(x.data(), pos, 1, 1, 64, RopeParams{RopeMode::Norm, 63, 1e4f, 1.0f}), Error);
  EXPECT_THROW(rope(x.data(), pos, 1, 1, 64, RopeParams{RopeMode::Norm, 66, 1e4f, 1.0f}), Error);
  EXPECT_THROW(rope(x.data(), pos, 1, 1, 64, RopeParams{RopeMode::Norm, 0, 1e4f, 1.0f}), Error);
  std::vector<float> table(66);
  EXPECT_THROW(rope_table(pos, 1, RopeParams{RopeMode::Norm, 63, 1e4f, 1.0f}, table.data()), Error);
  EXPECT_THROW(rope_apply(x.data(), table.data(), 1, 1, 64, RopeParams{RopeMode::Norm, 66, 1e4f, 1.0f}), Error);
}

}  // namespace
}  // namespace ridge::kernels
