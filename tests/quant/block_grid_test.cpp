// Block grids against the formats' own dequantizers: every element's code read back gives
// dequantize_row's value to the bit; codes written land where the dequantizer reads them;
// nearest() is the true nearest grid value.
#include "quant/block_grid.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/quant.h"

namespace ridge::quant {
namespace {

TEST(BlockGrid, CodesAndValuesAreTheDequantizersOwn) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K,
                     DType::Q6_K}) {
    const BlockGrid* g = block_grid(type);
    ASSERT_NE(g, nullptr) << dtype_name(type);
    const int64_t n = 2 * g->block_size;
    std::vector<float> x(static_cast<size_t>(n)), deq(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng) * 0.1f;
    std::vector<uint8_t> q(row_size(type, n));
    quantize_row(type, x.data(), q.data(), n);
    for (int round = 0; round < 2; ++round) {
      dequantize_row(type, q.data(), deq.data(), n);
      for (int64_t e = 0; e < n; ++e) {
        const uint8_t* block = q.data() + (e / g->block_size) * g->block_bytes;
        const int j = static_cast<int>(e % g->block_size);
        const int32_t code = g->get_code(block, j);
        ASSERT_GE(code, g->code_min);
        ASSERT_LE(code, g->code_max);
        ASSERT_EQ(g->value(block, j, code), deq[static_cast<size_t>(e)]) << dtype_name(type) << " element " << e;
      }
      // Write random codes everywhere, then check again (second round).
      std::uniform_int_distribution<int32_t> codes(g->code_min, g->code_max);
      for (int64_t e = 0; e < n; ++e)
        g->set_code(q.data() + (e / g->block_size) * g->block_bytes, static_cast<int>(e % g->block_size), codes(rng));
    }
    // nearest() against a brute-force search.
    const uint8_t* block = q.data();
    for (int trial = 0; trial < 200; ++trial) {
      const int j = static_cast<int>(rng() % static_cast<uint32_t>(g->block_size));
      const float target = normal(rng) * 0.15f;
      float got_value;
      const int32_t got = g->nearest(block, j, target, &got_value);
      float best = INFINITY;
      for (int32_t c = g->code_min; c <= g->code_max; ++c) best = std::min(best, std::fabs(g->value(block, j, c) - target));
      EXPECT_EQ(std::fabs(got_value - target), best) << dtype_name(type);
      EXPECT_EQ(g->value(block, j, got), got_value);
    }
  }
  EXPECT_EQ(block_grid(DType::F16), nullptr);
}

}  // namespace
}  // namespace ridge::quant
