// The parts of one step of the AMX-INT8 GEMM for 32-element blocks (Q8_0, Q4_0, Q5_0;
// gemm_amx_tiles.h), timed alone and together: what a 16-token x 16-row x 32-element block
// costs, and whether the tile unit's work hides behind the vector unit's or adds to it.
//
//   tiles      per block: tile A (16 tokens x 32 bytes) and B (16 rows x 32 bytes) loaded,
//              C zeroed, one TDPBSSD, C (16 x 16 int32) stored: the kernel's tile work.
//   combine    per block: the 16 tokens' dots converted and multiply-added with the
//              weight and activation scales into 16 accumulators: its vector work.
//   kernel     both, software-pipelined as the kernel runs them (block b + 1's tile work
//              issued before block b's combine).
//   products   TDPBSSD alone, its operands in tile registers (two accumulating tiles).
//   products_and_combine   TDPBSSD and the combine interleaved, on independent data.
//
// Each iteration runs a token tile's 64 blocks against 16 rows' 64 blocks, the operands
// of one call of the kernel at n_in = 2048 (76 KiB: from L2, as there). time/block is the
// time per 16 x 16 x 32 step ("11.2n": 11.2 ns). Where the units overlapped, `kernel`
// would take the longer of `tiles` and `combine`, and `products_and_combine` the longer
// of its two parts; docs/notes/amx-int8.md ("What bounds the AMX ratios on this core")
// has the figures of an Intel Xeon with AMX.
//
//   build-*/bench/amx_parts_benchmark
#include <benchmark/benchmark.h>

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <random>

#include "kernels/amx_tiles.h"
#include "kernels/gemm_amx.h"

#pragma GCC target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq,amx-tile,amx-int8")
// GCC 12 warns that the intrinsics' _mm512_undefined_*() pass-throughs are uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ridge::kernels {
namespace {

constexpr int kBlocks = 64;                        // n_in = 2048
constexpr int kActBlock = 16 * 32 + 64 + 64;       // a token tile's block, as the kernel lays it out
constexpr int kPanelBlock = 8 * 64 + 64;           // a panel's block: 8 vectors of 16 rows x 4 bytes, scales

struct Operands {
  alignas(64) uint8_t act[kBlocks * kActBlock];
  alignas(64) uint8_t panel[kBlocks * kPanelBlock];
  alignas(64) int32_t dots[4][16 * 16];
  Operands() {
    std::mt19937 rng(1);
    for (auto& byte : act) byte = static_cast<uint8_t>(rng());
    for (auto& byte : panel) byte = static_cast<uint8_t>(rng());
    for (int b = 0; b < kBlocks; ++b) {  // the scales: small floats
      for (int t = 0; t < 16; ++t) reinterpret_cast<float*>(act + b * kActBlock + 512)[t] = 0.01f;
      for (int r = 0; r < 16; ++r) reinterpret_cast<float*>(panel + b * kPanelBlock + 512)[r] = 0.02f;
    }
    std::memset(dots, 0, sizeof dots);
  }
};

enum class Part { kTiles, kCombine, kKernel, kProducts, kProductsAndCombine };

// One token tile over one panel's 64 blocks; returns the accumulators' sum (kept).
[[gnu::noinline]] float run_part(Operands& o, Part part) {
  __m512 acc[16];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const auto combine = [&](int set, int b) {
    const auto* d = reinterpret_cast<const float*>(o.act + b * kActBlock + 512);
    const __m512 dw = _mm512_load_ps(o.panel + b * kPanelBlock + 512);
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(o.dots[set] + 16 * t)),
                               _mm512_mul_ps(dw, _mm512_set1_ps(d[t])), acc[t]);
  };
#define RIDGE_PARTS_ISSUE(TA, TB, TC)                                \
  [&](int b) {                                                      \
    RIDGE_TILE_LOAD(TA, o.act + b * kActBlock, 32, 512);            \
    RIDGE_TILE_LOAD(TB, o.panel + b * kPanelBlock, 64, 512);        \
    _tile_zero(TC);                                                 \
    _tile_dpbssd(TC, TA, TB);                                       \
    RIDGE_TILE_STORE(TC, o.dots[TC - 4]);                           \
  }
  const auto issue0 = RIDGE_PARTS_ISSUE(0, 2, 4);
  const auto issue1 = RIDGE_PARTS_ISSUE(1, 3, 5);
#undef RIDGE_PARTS_ISSUE
  switch (part) {
    case Part::kTiles:
      for (int b = 0; b < kBlocks; b += 2) {
        issue0(b);
        issue1(b + 1);
      }
      break;
    case Part::kCombine:
      for (int b = 0; b < kBlocks; b += 2) {
        combine(0, b);
        combine(1, b + 1);
      }
      break;
    case Part::kKernel:
      issue0(0);
      for (int b = 0; b < kBlocks; b += 2) {
        issue1(b + 1);
        combine(0, b);
        if (b + 2 < kBlocks) issue0(b + 2);
        combine(1, b + 1);
      }
      break;
    case Part::kProducts:
    case Part::kProductsAndCombine:
      RIDGE_TILE_LOAD(0, o.act, 32, 512);
      RIDGE_TILE_LOAD(1, o.act + kActBlock, 32, 512);
      RIDGE_TILE_LOAD(2, o.panel, 64, 512);
      RIDGE_TILE_LOAD(3, o.panel + kPanelBlock, 64, 512);
      _tile_zero(4);
      _tile_zero(5);
      for (int b = 0; b < kBlocks; b += 2) {
        _tile_dpbssd(4, 0, 2);
        if (part == Part::kProductsAndCombine) combine(2, b);
        _tile_dpbssd(5, 1, 3);
        if (part == Part::kProductsAndCombine) combine(3, b + 1);
      }
      RIDGE_TILE_STORE(4, o.dots[0]);
      RIDGE_TILE_STORE(5, o.dots[1]);
      break;
  }
  __m512 sum = _mm512_setzero_ps();
  for (const auto& a : acc) sum = _mm512_add_ps(sum, a);
  return _mm512_reduce_add_ps(sum) + static_cast<float>(o.dots[0][0] + o.dots[1][0]);
}

void BM_AmxBlockStep(benchmark::State& state, Part part) {
  if (!amx_usable()) {
    state.SkipWithError(("skipped: no AMX (" + amx_status() + ")").c_str());
    return;
  }
  configure_tiles({{16, 32}, {16, 32}, {8, 64}, {8, 64}, {16, 64}, {16, 64}});
  static Operands operands;
  for (auto _ : state) benchmark::DoNotOptimize(run_part(operands, part));
  state.counters["time/block"] = benchmark::Counter(static_cast<double>(state.iterations()) * kBlocks,
                                                    benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK_CAPTURE(BM_AmxBlockStep, tiles, Part::kTiles);
BENCHMARK_CAPTURE(BM_AmxBlockStep, combine, Part::kCombine);
BENCHMARK_CAPTURE(BM_AmxBlockStep, kernel, Part::kKernel);
BENCHMARK_CAPTURE(BM_AmxBlockStep, products, Part::kProducts);
BENCHMARK_CAPTURE(BM_AmxBlockStep, products_and_combine, Part::kProductsAndCombine);

}  // namespace
}  // namespace ridge::kernels

BENCHMARK_MAIN();
