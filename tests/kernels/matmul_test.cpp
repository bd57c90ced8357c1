// matmul against the double reference on the same dequantized weights, for each weight
// type the engine meets in real GGUF files, plus the batching guarantees the engine
// relies on: a token's output does not depend on the batch or the thread count.
#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "test_util.h"

namespace ridge::kernels {
namespace {

using testing::random_floats;

// A random n_out x n_in matrix quantized to `type`, rows padded to row_bytes.
struct QuantizedMatrix {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

QuantizedMatrix make_matrix(DType type, int64_t n_in, int64_t n_out, size_t padding = 0) {
  const TypeTraits& traits = type_traits(type);
  const auto values = random_floats(static_cast<size_t>(n_in * n_out), 17);
  QuantizedMatrix m;
  const size_t row_bytes = row_size(type, n_in) + padding;
  m.bytes.assign(row_bytes * static_cast<size_t>(n_out), 0xAB);
  for (int64_t o = 0; o < n_out; ++o) {
    if (type == DType::F32)
      std::memcpy(m.bytes.data() + o * row_bytes, values.data() + o * n_in, n_in * sizeof(float));
    else
      traits.from_float(values.data() + o * n_in, m.bytes.data() + o * row_bytes, n_in);
  }
  m.w = WeightMatrix{type, n_in, n_out, m.bytes.data(), row_bytes};
  return m;
}

bool can_test(DType type) {
  const TypeTraits& t = type_traits(type);
  return type == DType::F32 || (t.to_float != nullptr && t.from_float != nullptr);
}

// n_in for a type: a few blocks, odd where the block size allows it.
int64_t odd_width(DType type) {
  const int64_t block = type_traits(type).block_size;
  return block == 1 ? 131 : 3 * block;
}

class MatmulByType : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulByType, MatchesDoubleReferenceOnSameWeights) {
  const DType type = GetParam();
  if (!can_test(type)) GTEST_SKIP() << dtype_name(type) << " has no quantizer/dequantizer yet";
  const int64_t n_in = odd_width(type), n_out = 37;
  const QuantizedMatrix m = make_matrix(type, n_in, n_out);
  std::vector<float> row(static_cast<size_t>(n_in));

  for (int64_t n_tokens : {1, 3, 17}) {
    const auto x = random_floats(static_cast<size_t>(n_tokens * n_in), 5 + n_tokens);
    ThreadPool pool(3);
    Scratch scratch(pool.n_threads(), matmul_scratch_floats(m.w));
    std::vector<float> got(static_cast<size_t>(n_tokens * n_out)), want(got.size());
    matmul(m.w, x.data(), got.data(), n_tokens, pool, scratch);
    matmul_reference(m.w, x.data(), want.data(), n_tokens);

    for (int64_t o = 0; o < n_out; ++o) {
      if (type == DType::F32)
        std::memcpy(row.data(), m.bytes.data() + o * m.w.row_bytes, n_in * sizeof(float));
      else
        type_traits(type).to_float(m.bytes.data() + o * m.w.row_bytes, row.data(), n_in);
      for (int64_t t = 0; t < n_tokens; ++t) {
        // Float accumulation error scales with the sum of |products|, not with the result.
        double magnitude = 0;
        for (int64_t i = 0; i < n_in; ++i) magnitude += std::fabs(double(row[i]) * x[t * n_in + i]);
        const double ref = want[t * n_out + o];
        EXPECT_NEAR(got[t * n_out + o], ref, 1e-5 + 1e-4 * std::fabs(ref) + 2e-6 * magnitude)
            << dtype_name(type) << " token " << t << " row " << o;
      }
    }
  }
}

TEST_P(MatmulByType, TokenResultIndependentOfBatchAndThreads) {
  const DType type = GetParam();
  if (!can_test(type)) GTEST_SKIP() << dtype_name(type) << " has no quantizer/dequantizer yet";
  const int64_t n_in = odd_width(type), n_out = 29, n_tokens = 17;
  const QuantizedMatrix m = make_matrix(type, n_in, n_out);
  const auto x = random_floats(static_cast<size_t>(n_tokens * n_in), 9);
  ThreadPool pool3(3), pool1(1);
  Scratch scratch(3, matmul_scratch_floats(m.w));

  std::vector<float> batched(static_cast<size_t>(n_tokens * n_out));
  matmul(m.w, x.data(), batched.data(), n_tokens, pool3, scratch);
  std::vector<float> single(static_cast<size_t>(n_out));
  for (int64_t t = 0; t < n_tokens; ++t) {
    matmul(m.w, x.data() + t * n_in, single.data(), 1, (t % 2) ? pool1 : pool3, scratch);
    for (int64_t o = 0; o < n_out; ++o)
      ASSERT_EQ(single[o], batched[t * n_out + o]) << "token " << t << " row " << o;
  }
}

INSTANTIATE_TEST_SUITE_P(WeightTypes, MatmulByType,
                         ::testing::Values(DType::F32, DType::F16, DType::Q8_0, DType::Q4_K, DType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Matmul, PaddedRowStrideIsHonoured) {
  const QuantizedMatrix m = make_matrix(DType::F32, 20, 9, /*padding=*/12);
  const auto x = random_floats(2 * 20, 3);
  ThreadPool pool(2);
  Scratch scratch(2, matmul_scratch_floats(m.w));
  std::vector<float> got(2 * 9), want(2 * 9);
  matmul(m.w, x.data(), got.data(), 2, pool, scratch);
  for (int64_t t = 0; t < 2; ++t)
    for (int64_t o = 0; o < 9; ++o) {
      const float* row = reinterpret_cast<const float*>(m.bytes.data() + o * m.w.row_bytes);
      double sum = 0;
      for (int i = 0; i < 20; ++i) sum += double(row[i]) * x[t * 20 + i];
      EXPECT_NEAR(got[t * 9 + o], sum, 1e-5);
    }
}

TEST(Matmul, RejectsUnusableWeightsAndSmallScratch) {
  std::vector<uint8_t> bytes(4096);
  ThreadPool pool(2);
  Scratch scratch(2, 1);
  float x[256] = {}, y[4] = {};
  // Q8_0 rows need a multiple of 32 columns.
  EXPECT_THROW(weight_matrix(DType::Q8_0, 33, 2, bytes.data()), Error);
  // Row stride shorter than a row.
  EXPECT_THROW(check_weight_matrix(WeightMatrix{DType::F32, 8, 2, bytes.data(), 16}, "w"), Error);
  // An id that is not a type at all.
  EXPECT_THROW(check_weight_matrix(WeightMatrix{static_cast<DType>(4), 32, 2, bytes.data(), 64}, "w"), Error);
  EXPECT_THROW(check_weight_matrix(WeightMatrix{DType::F32, 8, 2, nullptr, 32}, "w"), Error);
  if (can_test(DType::Q8_0)) {
    const WeightMatrix w = weight_matrix(DType::Q8_0, 256, 2, bytes.data());
    EXPECT_THROW(matmul(w, x, y, 1, pool, scratch), Error);  // needs 4 * 256 floats per thread
  }
  try {
    check_weight_matrix(WeightMatrix{DType::F32, 8, 2, bytes.data(), 16}, "blk.3.ffn_up.weight");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.3.ffn_up.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ridge::kernels
