// Row and elementwise kernels against their double references on odd sizes.
#include "kernels/ops/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "kernels/isa.h"
#include "kernels/ops/ops_avx2.h"
#include "kernels/ops/ops_avx512.h"
#include "kernels/ops/ops_reference.h"
#include "test_util.h"

namespace ridge::kernels {
namespace {

using testing::close;
using testing::random_floats;

TEST(Ops, RmsNormMatchesReferenceWithAndWithoutWeight) {
  const int64_t n_rows = 5, n = 97;
  const auto x = random_floats(n_rows * n, 1, 3.0f);
  const auto w = random_floats(n, 2);
  for (const float* weight : {w.data(), static_cast<const float*>(nullptr)}) {
    std::vector<float> got(x.size()), want(x.size());
    rms_norm(x.data(), weight, got.data(), n_rows, n, 1e-6f);
    rms_norm_reference(x.data(), weight, want.data(), n_rows, n, 1e-6f);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(close(got[i], want[i])) << i << ": " << got[i] << " vs " << want[i];
  }
}

TEST(Ops, RmsNormInPlaceGivesUnitRms) {
  auto x = random_floats(3 * 64, 3, 10.0f);
  rms_norm(x.data(), nullptr, x.data(), 3, 64, 0.0f);
  for (int r = 0; r < 3; ++r) {
    double sum = 0;
    for (int i = 0; i < 64; ++i) sum += double(x[r * 64 + i]) * x[r * 64 + i];
    EXPECT_NEAR(sum / 64, 1.0, 1e-5);
  }
}

TEST(Ops, ActivationsMatchReference) {
  auto x = random_floats(203, 4, 4.0f);
  x[0] = 0.0f;
  x[1] = -30.0f;  // far tails: silu -> -0, gelu -> 0
  x[2] = 30.0f;
  const auto up = random_floats(203, 5);
  std::vector<float> s(x.size()), g(x.size()), sw(x.size()), gg(x.size());
  silu(x.data(), s.data(), 203);
  gelu(x.data(), g.data(), 203);
  swiglu(x.data(), up.data(), sw.data(), 203);
  geglu(x.data(), up.data(), gg.data(), 203);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_TRUE(close(s[i], silu_reference(x[i]))) << x[i];
    EXPECT_TRUE(close(g[i], gelu_reference(x[i]))) << x[i];
    EXPECT_TRUE(close(sw[i], silu_reference(x[i]) * up[i])) << x[i];
    EXPECT_TRUE(close(gg[i], gelu_reference(x[i]) * up[i])) << x[i];
  }
  // Known values: silu(1) = 1 / (1 + e^-1); tanh-gelu(1) = 0.841192 (PyTorch's value).
  EXPECT_NEAR(silu_reference(1.0), 0.7310585786, 1e-9);
  EXPECT_NEAR(gelu_reference(1.0), 0.8411919906, 1e-9);
}

// Each SIMD width the CPU has, called directly (kernels/ops/ops.h dispatches to the widest only):
// within tolerance of the double reference, and the AVX-512 kernels bit-identical to the
// AVX2 ones, so a forced lower ISA gives the same activations. Lengths cover whole
// vectors of both widths and tails of every size class.
TEST(Ops, ActivationsOfEveryWidthAgree) {
  if (!cpu_supports(Isa::kAvx2)) GTEST_SKIP() << "skipped: no AVX2";
  const bool avx512 = cpu_supports(Isa::kAvx512Vnni);
  for (const int64_t n : {1, 7, 8, 15, 16, 17, 33, 203}) {
    auto x = random_floats(static_cast<size_t>(n), static_cast<uint32_t>(n), 6.0f);
    x[0] = n % 2 ? -95.0f : 95.0f;  // past the exp clamp
    const auto up = random_floats(static_cast<size_t>(n), static_cast<uint32_t>(n + 1));
    const float* xs = x.data();
    const float* ups = up.data();
    // Each kernel at both widths into y, and the reference value of element i.
    const struct {
      const char* name;
      std::function<void(float*)> avx2, avx512;
      std::function<double(int64_t)> want;
    } kernels[] = {
        {"silu", [&](float* y) { silu_avx2(xs, y, n); }, [&](float* y) { silu_avx512(xs, y, n); },
         [&](int64_t i) { return silu_reference(x[i]); }},
        {"gelu", [&](float* y) { gelu_avx2(xs, y, n); }, [&](float* y) { gelu_avx512(xs, y, n); },
         [&](int64_t i) { return gelu_reference(x[i]); }},
        {"swiglu", [&](float* y) { swiglu_avx2(xs, ups, y, n); }, [&](float* y) { swiglu_avx512(xs, ups, y, n); },
         [&](int64_t i) { return silu_reference(x[i]) * up[i]; }},
        {"geglu", [&](float* y) { geglu_avx2(xs, ups, y, n); }, [&](float* y) { geglu_avx512(xs, ups, y, n); },
         [&](int64_t i) { return gelu_reference(x[i]) * up[i]; }},
    };
    for (const auto& k : kernels) {
      std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      k.avx2(a.data());
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(close(a[i], k.want(i))) << k.name << " n " << n << " x " << x[i];
      if (!avx512) continue;
      k.avx512(b.data());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a[i], b[i]) << k.name << " n " << n << " x " << x[i];
    }
  }
}

TEST(Ops, GatedActivationsInPlace) {
  auto gate = random_floats(33, 6);
  const auto up = random_floats(33, 7);
  const auto gate0 = gate;
  swiglu(gate.data(), up.data(), gate.data(), 33);
  for (int i = 0; i < 33; ++i) EXPECT_TRUE(close(gate[i], silu_reference(gate0[i]) * up[i]));
}

TEST(Ops, SoftmaxMatchesReferenceAndSumsToOne) {
  const int64_t n_rows = 3, n = 1001;
  auto x = random_floats(n_rows * n, 8, 20.0f);  // large logits: needs the max subtraction
  std::vector<float> want(x.size());
  softmax_reference(x.data(), want.data(), n_rows, n);
  softmax(x.data(), n_rows, n);
  for (int64_t r = 0; r < n_rows; ++r) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(close(x[r * n + i], want[r * n + i])) << i;
      sum += x[r * n + i];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

TEST(Ops, SoftcapBoundsAndKeepsSmallValues) {
  std::vector<float> x = {0.0f, 1e-3f, -5.0f, 29.0f, 1000.0f, -1000.0f};
  const auto x0 = x;
  softcap(x.data(), static_cast<int64_t>(x.size()), 30.0f);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_TRUE(close(x[i], std::tanh(x0[i] / 30.0) * 30.0)) << x0[i];
  EXPECT_NEAR(x[4], 30.0f, 1e-5);
  EXPECT_NEAR(x[1], 1e-3f, 1e-8);
}

TEST(Ops, AddMulScale) {
  const auto a = random_floats(19, 9);
  const auto b = random_floats(19, 10);
  std::vector<float> sum(19), product(19);
  add(a.data(), b.data(), sum.data(), 19);
  mul(a.data(), b.data(), product.data(), 19);
  for (int i = 0; i < 19; ++i) {
    EXPECT_EQ(sum[i], a[i] + b[i]);
    EXPECT_EQ(product[i], a[i] * b[i]);
  }
  scale(sum.data(), 19, 2.0f);
  for (int i = 0; i < 19; ++i) EXPECT_EQ(sum[i], 2.0f * (a[i] + b[i]));
}

}  // namespace
}  // namespace ridge::kernels
