// The AMX-INT8 kernels against the scalar reference, bit for bit: every weight type,
// token counts on both sides of a 16-token tile and with remainders, row counts that do
// not fill a panel, random and extreme blocks; and the tile configuration on threads
// that never ran a tile kernel before. On CPUs without AMX each test says so and skips.
#include "kernels/gemm/amx.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "gemm_test_util.h"
#include "test_util.h"

namespace ridge::kernels {
namespace {

using testing::random_floats;
using testing::random_weight_bytes;
using testing::run_gemm;

struct Case {
  DType type;
  GemmFn fn;
};

const Case kCases[] = {{DType::Q8_0, gemm_q8_0_amx}, {DType::Q4_0, gemm_q4_0_amx}, {DType::Q5_0, gemm_q5_0_amx},
                       {DType::Q4_1, gemm_q4_1_amx}, {DType::Q5_1, gemm_q5_1_amx}, {DType::Q4_K, gemm_q4_k_amx},
                       {DType::Q5_K, gemm_q5_k_amx}, {DType::Q6_K, gemm_q6_k_amx}};

#define SKIP_WITHOUT_AMX() \
  if (!amx_usable()) GTEST_SKIP() << "skipped: no AMX (" << amx_status() << ")"

// A batch's quantized activation rows for a kernel's format.
std::vector<uint8_t> activations(ActFormat format, int64_t n, int64_t n_tokens, uint32_t seed, bool extreme) {
  auto x = random_floats(static_cast<size_t>(n * n_tokens), seed, 4.0f);
  if (extreme)
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0) ? -1.0f : 1.0f;  // every q at +-127
  const size_t stride = act_row_bytes(format, n);
  std::vector<uint8_t> act(stride * n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t)
    quantize_activations(format, Isa::kScalar, x.data() + t * n, act.data() + t * stride, n);
  return act;
}

// Runs `fn` (laying out its own activation tiles, then given them) and the scalar
// reference on one random problem; returns the first index where they differ, or -1.
int64_t first_difference(const Case& c, int64_t n, int64_t n_rows, int64_t n_tokens, bool extreme, uint32_t seed) {
  const GemmKernel* ref = gemm_kernel(c.type, Isa::kScalar);
  auto w = random_weight_bytes(c.type, n, n_rows, seed);
  if (extreme) testing::make_extreme(c.type, w);
  const auto act = activations(ref->act, n, n_tokens, seed + 1, extreme);
  const size_t stride = act_row_bytes(ref->act, n);
  const int64_t ldy = n_rows + 3;
  const auto want = run_gemm(ref->gemm, ref->act, w, row_size(c.type, n), act, stride, n, n_rows, n_tokens, ldy);
  const auto got = run_gemm(c.fn, ref->act, w, row_size(c.type, n), act, stride, n, n_rows, n_tokens, ldy);
  for (size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i])) return static_cast<int64_t>(i);
  // Again with the activation tiles laid out beforehand, as matmul passes them.
  const int64_t n_tiles = n_tokens / 16;
  std::vector<uint8_t> tiles(n_tiles * amx_act_tile_bytes(ref->act, n));
  amx_build_act_tiles(ref->act, act.data(), stride, n, 0, n_tiles, tiles.data());
  std::vector<float> y(static_cast<size_t>(ldy * n_tokens), -7.0f);
  GemmArgs args{n, w.data(), row_size(c.type, n), act.data(), stride, y.data(), ldy};
  args.amx_tiles = tiles.data();
  c.fn(args, n_rows, n_tokens);
  for (size_t i = 0; i < y.size(); ++i)
    if (!(y[i] == want[i])) return static_cast<int64_t>(y.size() + i);  // past got: the prebuilt run
  // One token tile: with its transposed B laid out beforehand as well (an offset past
  // both runs above).
  if (n_tiles == 1) {
    std::vector<uint8_t> b(amx_rows_b_bytes(ref->act, n) + 64);
    uint8_t* aligned = b.data() + (64 - reinterpret_cast<uintptr_t>(b.data()) % 64) % 64;
    amx_build_rows_b(ref->act, tiles.data(), n, aligned);
    std::fill(y.begin(), y.end(), -7.0f);
    args.amx_rows_b = aligned;
    c.fn(args, n_rows, n_tokens);
    for (size_t i = 0; i < y.size(); ++i)
      if (!(y[i] == want[i])) return static_cast<int64_t>(2 * y.size() + i);
  }
  return -1;
}

TEST(GemmAmx, EqualsScalarReferenceBitForBit) {
  SKIP_WITHOUT_AMX();
  for (const Case& c : kCases) {
    const int64_t block = type_traits(c.type).block_size;
    // One block, an odd number of blocks, and a wide row.
    for (const int64_t n : {block, block == 32 ? int64_t{9 * 32} : 3 * 256, block == 32 ? int64_t{40 * 32} : 8 * 256}) {
      for (bool extreme : {false, true}) {
        for (int64_t n_rows : {7, 16, 23, 40}) {
          for (int64_t n_tokens : {1, 15, 16, 17, 32, 37, 50, 80}) {  // below a tile, tile pairs, + remainders
            const auto seed = static_cast<uint32_t>(n * 7 + n_rows * 131 + n_tokens);
            ASSERT_EQ(first_difference(c, n, n_rows, n_tokens, extreme, seed), -1)
                << dtype_name(c.type) << " width " << n << " rows " << n_rows << " tokens " << n_tokens
                << " extreme " << extreme;
          }
        }
      }
    }
  }
}

// Rows long enough that the batch's activations outgrow the kernels' L2 share (a MiB):
// the 256-element types take the blocks in slices, their sums carried through y between
// slices, and must still give the reference's bits (tile pairs, a single tile and a
// remainder token; rows past a whole tile).
TEST(GemmAmx, LongRowsInSlicesEqualScalarReference) {
  SKIP_WITHOUT_AMX();
  for (const Case& c : kCases) {
    if (type_traits(c.type).block_size != 256) continue;
    for (bool extreme : {false, true}) {
      const int64_t n = 61 * 256, n_rows = 23, n_tokens = 81;  // 5 tiles: 1.3 MB of activation tiles
      ASSERT_EQ(first_difference(c, n, n_rows, n_tokens, extreme, 11), -1)
          << dtype_name(c.type) << " extreme " << extreme;
    }
  }
}

// A thread that never ran a tile kernel gets its configuration from the kernel itself:
// new threads, and every thread of pools of 1 to 4 threads, each running a share of the
// rows, all agree with the reference. The types alternate between the two tile
// configurations on the same threads.
TEST(GemmAmx, EveryThreadConfiguresItsOwnTiles) {
  SKIP_WITHOUT_AMX();
  for (const Case& c : kCases) {
    std::thread fresh([&] { EXPECT_EQ(first_difference(c, 512, 16, 32, false, 5), -1) << dtype_name(c.type); });
    fresh.join();
  }
  for (int n_threads = 1; n_threads <= 4; ++n_threads) {
    ThreadPool pool(n_threads);
    for (const Case& c : kCases) {
      std::vector<int64_t> diff(static_cast<size_t>(n_threads), -2);
      pool.parallel_for(n_threads, [&](int64_t begin, int64_t end, int) {
        for (int64_t i = begin; i < end; ++i)
          diff[i] = first_difference(c, 512, 16 + 8 * i, 32, false, static_cast<uint32_t>(11 * i + n_threads));
      });
      for (int i = 0; i < n_threads; ++i)
        EXPECT_EQ(diff[i], -1) << dtype_name(c.type) << " thread " << i << " of " << n_threads;
    }
  }
}

TEST(GemmAmx, PeakProbeMeasuresTheTiles) {
  SKIP_WITHOUT_AMX();
  // One TDPBSSD is 16384 multiply-adds; any real tile unit issues well over one per
  // microsecond (3.3e10 ops/s), and none reaches 1e15 on one core.
  const double one = amx_int8_peak_ops_per_s(1, 0.02);
  EXPECT_GT(one, 3.3e10);
  EXPECT_LT(one, 1e15);
}

TEST(GemmAmx, StatusSaysWhy) {
  const std::string& status = amx_status();
  if (amx_usable()) EXPECT_EQ(status, "AMX-INT8 usable");
  else EXPECT_NE(status.find("AMX not used: "), std::string::npos) << status;
  EXPECT_EQ(amx_int8_peak_ops_per_s(0), 0.0);
}

}  // namespace
}  // namespace ridge::kernels
