// The layouts repacked at load (kernels/gemm/repack.h): the repack keeps every byte, and
// each ISA's kernel over Q4_K_R16 gives, bit for bit, what the Q4_K scalar reference gives
// on the matrix as stored: odd row counts (a last group of 1-15 rows), batches of 1-3
// tokens (the decode tiles) and 4-20 (the panels), and thread counts that split the
// groups unevenly.
#include "kernels/gemm/repack.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/aligned_vector.h"
#include "core/thread_pool.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/table.h"
#include "gemm_test_util.h"
#include "test_util.h"

namespace ridge::kernels {
namespace {

using testing::random_floats;
using testing::random_weight_bytes;

struct Repacked {
  std::vector<uint8_t> stored;   // Q4_K as in a file
  AlignedVector<uint8_t> bytes;  // Q4_K_R16
  WeightMatrix original, repacked;
};

Repacked make_repacked(int64_t n_in, int64_t n_out, uint32_t seed) {
  Repacked m;
  m.stored = random_weight_bytes(DType::Q4_K, n_in, n_out, seed);
  m.original = weight_matrix(DType::Q4_K, n_in, n_out, m.stored.data());
  m.bytes.resize(repacked_bytes(DType::Q4_K_R16, n_in, n_out));
  m.repacked = repack(m.original, DType::Q4_K_R16, m.bytes.data());
  return m;
}

TEST(Repack, KeepsEveryByteOfEveryRow) {
  for (int64_t n_out : {1, 15, 16, 17, 33}) {
    const Repacked m = make_repacked(3 * 256, n_out, 7 + static_cast<uint32_t>(n_out));
    EXPECT_EQ(m.repacked.dtype, DType::Q4_K_R16);
    EXPECT_EQ(m.repacked.row_bytes, m.original.row_bytes);
    EXPECT_EQ(m.bytes.size(), static_cast<size_t>((n_out + 15) / 16 * 16) * m.original.row_bytes);
    std::vector<uint8_t> row(m.original.row_bytes);
    for (int64_t r = 0; r < n_out; ++r) {
      unpack_row(m.repacked, r, row.data());
      EXPECT_EQ(0, std::memcmp(row.data(), m.stored.data() + r * m.original.row_bytes, row.size())) << "row " << r;
    }
  }
}

TEST(Repack, RefusesOtherTypes) {
  const auto bytes = random_weight_bytes(DType::Q6_K, 256, 4, 1);
  const WeightMatrix w = weight_matrix(DType::Q6_K, 256, 4, bytes.data());
  std::vector<uint8_t> dst(repacked_bytes(DType::Q4_K_R16, 256, 4));
  EXPECT_THROW(repack(w, DType::Q4_K_R16, dst.data()), Error);
}

TEST(Repack, TheAvx512TableRunsQ4KFromTheRepackedLayout) {
  EXPECT_EQ(repack_target(DType::Q4_K, Isa::kAvx512Vnni), DType::Q4_K_R16);
  EXPECT_EQ(repack_target(DType::Q4_K, Isa::kScalar), std::nullopt);
  EXPECT_EQ(repack_target(DType::Q4_K, Isa::kAmxInt8), std::nullopt);  // the tiles read Q4_K as stored
  EXPECT_EQ(repack_target(DType::Q6_K, Isa::kAvx512Vnni), std::nullopt);
}

// Each kernel against the scalar Q4_K reference on the stored matrix, exactly.
TEST(Repack, KernelsMatchTheQ4KReferenceBitForBit) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512Vnni}) {
    if (!cpu_supports(isa)) continue;
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      for (int64_t n_in : {256, 3 * 256, 10 * 256}) {
        for (int64_t n_out : {1, 7, 16, 17, 40, 100}) {
          const Repacked m = make_repacked(n_in, n_out, static_cast<uint32_t>(n_in + n_out + threads));
          for (int64_t n_tokens : {1, 2, 3, 4, 5, 9, 20}) {  // row tiles, blockwise panels, whole panels
            SCOPED_TRACE(::testing::Message() << isa_name(isa) << " threads " << threads << " n_in " << n_in << " n_out "
                                              << n_out << " n_tokens " << n_tokens);
            const auto x = random_floats(static_cast<size_t>(n_in * n_tokens), static_cast<uint32_t>(n_tokens));
            Scratch scratch(pool.n_threads(), matmul_scratch_floats(m.original));
            scratch.reserve_shared(matmul_shared_bytes(m.original, n_tokens));
            std::vector<float> want(static_cast<size_t>(n_out * n_tokens)), got(want.size(), -7.0f);
            matmul_isa(m.original, x.data(), want.data(), n_tokens, pool, scratch, Isa::kScalar);
            matmul_isa(m.repacked, x.data(), got.data(), n_tokens, pool, scratch, isa);
            for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "output " << i;
          }
        }
      }
    }
  }
}

// The kernels write the rows they are given and nothing past them (a last group of 17
// rows: 1 of its 16 lanes), with ldy wider than the rows.
TEST(Repack, KernelsWriteOnlyTheirRows) {
  const int64_t n_in = 2 * 256, n_out = 17, n_tokens = 3, ldy = 24;
  const Repacked m = make_repacked(n_in, n_out, 5);
  const auto x = random_floats(static_cast<size_t>(n_in * n_tokens), 9);
  std::vector<uint8_t> act(static_cast<size_t>(n_tokens) * act_row_bytes(ActFormat::kQ8_K, n_in));
  const size_t stride = act_row_bytes(ActFormat::kQ8_K, n_in);
  for (int64_t t = 0; t < n_tokens; ++t) quantize_act_q8_k_scalar(x.data() + t * n_in, act.data() + t * stride, n_in);
  std::vector<uint8_t> w(m.bytes.begin(), m.bytes.end());
  const auto want = testing::run_gemm(gemm_q4_k_r16_scalar, ActFormat::kQ8_K, w, m.original.row_bytes, act, stride, n_in,
                                      n_out, n_tokens, ldy);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t r = n_out; r < ldy; ++r) EXPECT_EQ(want[t * ldy + r], -7.0f);
  for (auto [isa, fn] : {std::pair<Isa, GemmFn>{Isa::kAvx2, gemm_q4_k_r16_avx2},
                         std::pair<Isa, GemmFn>{Isa::kAvx512Vnni, gemm_q4_k_r16_avx512}}) {
    if (!cpu_supports(isa)) continue;
    SCOPED_TRACE(isa_name(isa));
    const auto got = testing::run_gemm(fn, ActFormat::kQ8_K, w, m.original.row_bytes, act, stride, n_in, n_out, n_tokens, ldy);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "output " << i;
  }
}

// The dequantizing paths (matmul_reference, --matmul float) read the repacked rows too.
TEST(Repack, ReferenceAndFloatModeReadRepackedRows) {
  const Repacked m = make_repacked(2 * 256, 19, 3);
  const auto x = random_floats(2 * 256, 4);
  std::vector<float> want(19), got(19);
  matmul_reference(m.original, x.data(), want.data(), 1);
  matmul_reference(m.repacked, x.data(), got.data(), 1);
  EXPECT_EQ(got, want);
  ThreadPool pool(2);
  Scratch scratch(pool.n_threads(), matmul_scratch_floats(m.original));
  scratch.reserve_shared(matmul_shared_bytes(m.original, 1));
  set_matmul_mode(MatmulMode::kFloat);
  matmul(m.original, x.data(), want.data(), 1, pool, scratch);
  matmul(m.repacked, x.data(), got.data(), 1, pool, scratch);
  set_matmul_mode(MatmulMode::kQuantized);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace ridge::kernels
