// Importance-weighted quantizers: without importance (or for the types ggml quantizes
// without it) they are the references byte for byte; the weighted searches reduce to the
// references' when given the references' own weights; only importance ratios matter; and
// with non-uniform importance they lower the importance-weighted squared error
// sum_j w_j (x_j - q_j)^2 below the reference's on random data, for every weighted type.
// (Byte equality with llama-quantize --imatrix is an interop check, not run here.)
#include "core/quant_weighted.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/quant.h"
#include "core/quant_k_search.h"

namespace ridge {
namespace {

constexpr DType kWeightedTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                                    DType::Q4_K, DType::Q5_K, DType::Q6_K};

std::vector<float> gaussian(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = dist(rng);
  return x;
}

// Log-normal importance, as activation mean squares are: a few channels far above the rest.
std::vector<float> skewed_importance(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.5f);
  std::vector<float> w(static_cast<size_t>(n));
  for (float& v : w) v = std::exp(dist(rng));
  return w;
}

std::vector<uint8_t> reference(DType type, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_size(type, static_cast<int64_t>(x.size())));
  quantize_row(type, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

std::vector<uint8_t> weighted(DType type, const std::vector<float>& x, const float* importance) {
  std::vector<uint8_t> q(row_size(type, static_cast<int64_t>(x.size())));
  quantize_row_weighted(type, x.data(), q.data(), static_cast<int64_t>(x.size()), importance);
  return q;
}

double weighted_error(DType type, const std::vector<float>& x, const std::vector<uint8_t>& q,
                      const std::vector<float>& importance) {
  std::vector<float> y(x.size());
  dequantize_row(type, q.data(), y.data(), static_cast<int64_t>(x.size()));
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i) e += importance[i] * (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
  return e;
}

TEST(QuantWeighted, WithoutImportanceIsTheReference) {
  const std::vector<float> x = gaussian(512, 1);
  for (DType type : kWeightedTypes) {
    SCOPED_TRACE(dtype_name(type));
    EXPECT_EQ(weighted(type, x, nullptr), reference(type, x));
  }
}

TEST(QuantWeighted, TypesGgmlQuantizesUnweightedIgnoreImportance) {
  const std::vector<float> x = gaussian(512, 2);
  const std::vector<float> w = skewed_importance(512, 3);
  for (DType type : {DType::Q8_0, DType::F16, DType::BF16, DType::F32}) {
    SCOPED_TRACE(dtype_name(type));
    EXPECT_FALSE(quantizer_uses_importance(type));
    EXPECT_EQ(weighted(type, x, w.data()), reference(type, x));
  }
  for (DType type : kWeightedTypes) EXPECT_TRUE(quantizer_uses_importance(type)) << dtype_name(type);
}

// The reference Q6_K fits each group of 16 weighting x by x^2; the weighted one weighs by
// the importance alone, so importance x^2 must give the reference's bytes.
TEST(QuantWeighted, Q6KWithTheReferencesOwnWeightsIsTheReference) {
  for (uint32_t seed : {4u, 5u, 6u}) {
    const std::vector<float> x = gaussian(768, seed);
    std::vector<float> squares(x.size());
    for (size_t i = 0; i < x.size(); ++i) squares[i] = x[i] * x[i];
    EXPECT_EQ(weighted(DType::Q6_K, x, squares.data()), reference(DType::Q6_K, x)) << "seed " << seed;
  }
}

TEST(QuantWeighted, SymmetricFitWithSquaredWeightsIsTheReferenceFit) {
  for (int nmax : {4, 8, 16, 32}) {
    const std::vector<float> x = gaussian(32, 7 + static_cast<uint32_t>(nmax));
    std::vector<float> squares(x.size());
    for (size_t i = 0; i < x.size(); ++i) squares[i] = x[i] * x[i];
    int8_t codes_ref[32], codes_w[32];
    const float s_ref = quant_k::fit_symmetric_scale(32, nmax, x.data(), codes_ref);
    const float s_w = quant_k::fit_symmetric_scale_weighted(32, nmax, x.data(), squares.data(), codes_w);
    EXPECT_EQ(s_ref, s_w) << "nmax " << nmax;
    EXPECT_EQ(std::vector<int8_t>(codes_ref, codes_ref + 32), std::vector<int8_t>(codes_w, codes_w + 32));
  }
}

// Every sum the searches compare scales by the same power of two, exactly.
TEST(QuantWeighted, OnlyImportanceRatiosMatter) {
  const std::vector<float> x = gaussian(512, 8);
  const std::vector<float> w = skewed_importance(512, 9);
  std::vector<float> w4(w.size()), uniform(w.size(), 1.0f), uniform_quarter(w.size(), 0.25f);
  for (size_t i = 0; i < w.size(); ++i) w4[i] = 4 * w[i];
  for (DType type : kWeightedTypes) {
    SCOPED_TRACE(dtype_name(type));
    EXPECT_EQ(weighted(type, x, w.data()), weighted(type, x, w4.data()));
    EXPECT_EQ(weighted(type, x, uniform.data()), weighted(type, x, uniform_quarter.data()));
  }
}

TEST(QuantWeighted, LowersTheImportanceWeightedError) {
  constexpr int64_t kRows = 64, kCols = 512;
  const std::vector<float> w = skewed_importance(kCols, 10);
  for (DType type : kWeightedTypes) {
    double e_ref = 0, e_weighted = 0;
    for (int64_t r = 0; r < kRows; ++r) {
      const std::vector<float> x = gaussian(kCols, 100 + static_cast<uint32_t>(r));
      e_ref += weighted_error(type, x, reference(type, x), w);
      e_weighted += weighted_error(type, x, weighted(type, x, w.data()), w);
    }
    EXPECT_LT(e_weighted, 0.9 * e_ref) << dtype_name(type) << ": weighted " << e_weighted << ", reference " << e_ref;
  }
}

TEST(QuantWeighted, ZeroRowsAndBlocksStayZero) {
  std::vector<float> x(512, 0.0f);
  const std::vector<float> w = skewed_importance(512, 11);
  for (DType type : kWeightedTypes) {
    const std::vector<uint8_t> q = weighted(type, x, w.data());
    std::vector<float> y(x.size(), 1.0f);
    dequantize_row(type, q.data(), y.data(), 512);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(type);
  }
}

TEST(QuantWeighted, CheckedEntryPoint) {
  const std::vector<float> x = gaussian(256, 12);
  const std::vector<float> w(256, 1.0f);
  std::vector<uint8_t> q(row_size(DType::Q2_K, 256));
  EXPECT_THROW(quantize_row_weighted(DType::Q2_K, x.data(), q.data(), 256, w.data()), Error);
  quantize_row_weighted(DType::Q2_K, x.data(), q.data(), 256, nullptr);  // the reference
  EXPECT_THROW(quantize_row_weighted(DType::Q4_K, x.data(), q.data(), 96, w.data()), Error);
}

}  // namespace
}  // namespace ridge
