// GPTQ on a synthetic layer: correlated inputs, so error feedback has something to work
// with. Its output error beats round-to-nearest's on every grid type, its blocks are
// ordinary blocks of the type, and act-order and dead columns behave.
#include "quant/gptq.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/quant.h"

namespace ridge::quant {
namespace {

struct Layer {
  int64_t rows, cols, n;
  std::vector<float> w, x;  // w [rows][cols], x [n][cols]
};

// Inputs x = z A with a random mixing A, a few large "outlier" features, as in real models.
Layer make_layer(int64_t rows, int64_t cols, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Layer l{rows, cols, n, std::vector<float>(static_cast<size_t>(rows * cols)), std::vector<float>(static_cast<size_t>(n * cols))};
  for (float& v : l.w) v = normal(rng) * 0.05f;
  std::vector<float> a(static_cast<size_t>(cols * cols));
  for (float& v : a) v = normal(rng) / std::sqrt(static_cast<float>(cols));
  std::vector<float> z(static_cast<size_t>(cols));
  for (int64_t t = 0; t < n; ++t) {
    for (float& v : z) v = normal(rng);
    for (int64_t c = 0; c < cols; ++c) {
      float s = 0;
      for (int64_t k = 0; k < cols; ++k) s += z[static_cast<size_t>(k)] * a[static_cast<size_t>(k * cols + c)];
      l.x[static_cast<size_t>(t * cols + c)] = s * (c % 37 == 0 ? 8.0f : 1.0f);
    }
  }
  return l;
}

std::vector<float> dequantized(DType type, const std::vector<uint8_t>& q, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(type, q.data() + static_cast<size_t>(r) * row_size(type, cols), out.data() + r * cols, cols);
  return out;
}

TEST(Gptq, LowersTheOutputErrorOfRoundToNearest) {
  const Layer l = make_layer(48, 512, 1024, 1);
  Hessian h(l.cols);
  h.add(l.x.data(), l.n / 2);  // in two batches, as a forward pass gives them
  h.add(l.x.data() + (l.n / 2) * l.cols, l.n / 2);
  EXPECT_EQ(h.samples(), l.n);
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    const size_t bytes = row_size(type, l.cols) * static_cast<size_t>(l.rows);
    std::vector<uint8_t> rtn(bytes), gptq(bytes);
    for (int64_t r = 0; r < l.rows; ++r)
      quantize_row(type, l.w.data() + r * l.cols, rtn.data() + static_cast<size_t>(r) * row_size(type, l.cols), l.cols);
    gptq_quantize(type, l.w.data(), l.rows, l.cols, h, {}, gptq.data());
    const double e_rtn = relative_output_error(l.w.data(), dequantized(type, rtn, l.rows, l.cols).data(), l.rows, l.cols, h);
    const double e_gptq = relative_output_error(l.w.data(), dequantized(type, gptq, l.rows, l.cols).data(), l.rows, l.cols, h);
    EXPECT_LT(e_gptq, 0.75 * e_rtn) << dtype_name(type) << ": GPTQ " << e_gptq << " vs RTN " << e_rtn;
    GptqOptions ordered;
    ordered.act_order = true;
    std::vector<uint8_t> act(bytes);
    gptq_quantize(type, l.w.data(), l.rows, l.cols, h, ordered, act.data());
    const double e_act = relative_output_error(l.w.data(), dequantized(type, act, l.rows, l.cols).data(), l.rows, l.cols, h);
    EXPECT_LT(e_act, e_rtn) << dtype_name(type);
  }
}

TEST(Gptq, DeadColumnsAreZeroAndBadShapesThrow) {
  Layer l = make_layer(8, 64, 256, 2);
  for (int64_t t = 0; t < l.n; ++t) l.x[static_cast<size_t>(t * l.cols + 5)] = 0.0f;  // feature 5 never fires
  Hessian h(l.cols);
  h.add(l.x.data(), l.n);
  std::vector<uint8_t> q(row_size(DType::Q8_0, l.cols) * 8);
  gptq_quantize(DType::Q8_0, l.w.data(), l.rows, l.cols, h, {}, q.data());
  const std::vector<float> d = dequantized(DType::Q8_0, q, l.rows, l.cols);
  for (int64_t r = 0; r < l.rows; ++r) EXPECT_EQ(d[static_cast<size_t>(r * l.cols + 5)], 0.0f);
  EXPECT_THROW(gptq_quantize(DType::F16, l.w.data(), l.rows, l.cols, h, {}, q.data()), Error);
  EXPECT_THROW(gptq_quantize(DType::Q4_K, l.w.data(), l.rows, l.cols, h, {}, q.data()), Error);  // 64 % 256
  Hessian other(32);
  EXPECT_THROW(gptq_quantize(DType::Q8_0, l.w.data(), l.rows, l.cols, other, {}, q.data()), Error);
}

}  // namespace
}  // namespace ridge::quant
