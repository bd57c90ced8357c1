// What the AMX-INT8 GEMM files (amx_panels.cpp, amx_rows.cpp) share: the tile shapes,
// the activations laid out for tile loads, the row chunks and block slices that keep a
// call's operands in L2, and the one-token-tile kernels the panel kernels hand a single
// tile. Internal to those files, after their AMX target pragma; internal linkage, as
// avx512_panels.h, except the one-token-tile entries (defined in amx_rows.cpp).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/quant_blocks.h"
#include "kernels/gemm/amx.h"
#include "kernels/gemm/avx512_panels.h"
#include "kernels/amx_tiles.h"

namespace ridge::kernels {

// One token tile (16-31 tokens: batched decode) with the weight rows as tile A, for the
// types that have it (amx_rows.cpp): Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, Q4_K, Q5_K, Q6_K.
// Bit-identical to the panel kernels and the scalar reference; tokens past the tile run
// on the AVX-512 kernels.
void gemm_amx_rows_q8_0(const GemmArgs& a, int64_t n_rows, int64_t n_tokens);
void gemm_amx_rows_q4_0(const GemmArgs& a, int64_t n_rows, int64_t n_tokens);
void gemm_amx_rows_q5_0(const GemmArgs& a, int64_t n_rows, int64_t n_tokens);
void gemm_amx_rows_q4_1(const GemmArgs& a, int64_t n_rows, int64_t n_tokens);
void gemm_amx_rows_q5_1(const GemmArgs& a, int64_t n_rows, int64_t n_tokens);
void gemm_amx_rows_q4_k(const GemmArgs& a, int64_t n_rows, int64_t n_tokens);
void gemm_amx_rows_q5_k(const GemmArgs& a, int64_t n_rows, int64_t n_tokens);
void gemm_amx_rows_q6_k(const GemmArgs& a, int64_t n_rows, int64_t n_tokens);

namespace {

constexpr int kAmxTokens = 16;  // tokens per A tile (its rows)

// The smallest batches the tiles take: below, unpacking the panels for so few tokens
// costs more than the tiles save. Measured at 16 tokens against the AVX-512 kernels
// (one thread): Q8_0 and Q5_0 1.3-1.5x, Q6_K 1.1x, Q4_K 0.9-1.0x; at 32, Q4_K 1.4x.
constexpr int64_t kAmxMinTokensQ8 = 16, kAmxMinTokensK = 32;

// Tokens t0.. of `a` as a call of their own: the batch remainder the tiles leave.
inline GemmArgs tokens_from(const GemmArgs& a, int64_t t0) {
  GemmArgs rest = a;
  rest.act = a.act + t0 * a.act_stride;
  rest.y = a.y + t0 * a.ldy;
  rest.scales_t = nullptr;  // the AVX-512 kernels do not read the transposed tables
  rest.sums_t = nullptr;
  return rest;
}

// The batch's activations laid out for the tiles when the caller did not pass them
// (GemmArgs::amx_tiles): for each 16-token tile and block, the A tile's bytes (16 rows,
// contiguous: loads stream instead of touching 16 scattered rows), the 16 tokens'
// scales, and any per-token integers the family needs. Per-thread, grown like the panel.
uint8_t* act_tile_buffer(size_t bytes) { return thread_buffer<1>(bytes, "activation tiles"); }

// The blocks of one output tile (16 rows x 16 tokens), software-pipelined: the tile
// work of block b + 1 is issued before the vector work of block b, so the tile unit can
// compute the next block's dots while the vector unit applies this block's scales.
// issue0/issue1 use disjoint tiles and dot buffers 0/1, alternating;
// combine(acc, buffer, b) folds block b's dots into the 16 accumulators; they are passed
// in rather than captured, so they stay in registers (a lambda holding a reference to
// them kept them on the stack: a load and a store around every fma).
template <class Issue0, class Issue1, class Combine>
[[gnu::always_inline]] inline void pipelined_blocks(int64_t nb, Issue0&& issue0, Issue1&& issue1, Combine&& combine,
                                                    __m512 (&acc)[kAmxTokens]) {
  issue0(0);
  for (int64_t b = 0; b < nb; b += 2) {
    if (b + 1 < nb) issue1(b + 1);
    combine(acc, 0, b);
    if (b + 1 >= nb) break;
    if (b + 2 < nb) issue0(b + 2);
    combine(acc, 1, b + 1);
  }
}

// Rows in chunks whose packed panels fit in kAmxChunkBytes of L2: a chunk's panels are
// packed once, then each token tile runs across all of them, so each token's outputs
// are written in runs of whole chunks. (Panel by panel, every 16-row output tile wrote
// one cache line in each of 16 token rows a whole row of y apart: at 512 tokens those
// scattered writes, each on its own page, halved the speed of 896-wide matrices.)
constexpr size_t kAmxChunkBytes = 1024 * 1024;

// The blocks of a row are taken in slices whose activations, for every token tile of the
// batch, fit in kAmxSliceBytes of L2 beside the chunk's panels. Without them a 8960-wide
// down projection at 512 tokens (4.9 MB of activations) streamed all its activations from
// L3 for every 48-row chunk. Between slices the accumulators go through y and come back:
// the same float operations in the same order, so outputs do not change.
constexpr size_t kAmxSliceBytes = 1024 * 1024;

// Slices never shorter than this: each slice's run starts the block pipeline afresh and
// takes its sums from y and back. At 2048 tokens (perplexity's batches) the budget alone
// gave 1536-wide rows slices of one block, and ffn_up took 108 ms instead of 63.
constexpr int64_t kAmxMinSliceBlocks = 8;

// Slices of nb blocks, each at most max(blocks, kAmxMinSliceBlocks) long and all about
// as long.
inline int64_t amx_slice_blocks(int64_t nb, int64_t blocks) {
  const int64_t most = std::max(blocks, kAmxMinSliceBlocks);
  const int64_t slices = (nb + most - 1) / most;
  return (nb + slices - 1) / slices;
}

// For each slice [k0, k1) of the nb blocks: pack(r0, rows, panel, k0, k1) packs blocks
// k0..k1-1 of rows r0..r0+rows-1; run(panel, r0, rows, tile, count, k0, k1) computes them
// for token tiles tile..tile+count-1 (count at most tiles_per_run), starting from zero
// when k0 is 0 and from y otherwise. panel_bytes(blocks) is a panel's size.
template <class PanelBytes, class Pack, class Run>
[[gnu::always_inline]] inline void amx_row_chunks(int64_t n_rows, int64_t n_tiles, int64_t tiles_per_run, int64_t nb,
                                                  int64_t slice_blocks, PanelBytes&& panel_bytes, Pack&& pack,
                                                  Run&& run) {
  for (int64_t k0 = 0; k0 < nb; k0 += slice_blocks) {
    const int64_t k1 = std::min(nb, k0 + slice_blocks);
    const size_t bytes = panel_bytes(k1 - k0);
    const int64_t per_chunk = std::max<int64_t>(1, static_cast<int64_t>(kAmxChunkBytes / bytes));
    uint8_t* panels = panel_buffer(static_cast<size_t>(per_chunk) * bytes);
    for (int64_t c0 = 0; c0 < n_rows; c0 += per_chunk * kPanelRows) {
      const int64_t c1 = std::min(n_rows, c0 + per_chunk * kPanelRows);
      const auto panel = [&](int64_t r0) { return panels + (r0 - c0) / kPanelRows * bytes; };
      const auto rows = [&](int64_t r0) { return static_cast<int>(std::min<int64_t>(kPanelRows, c1 - r0)); };
      for (int64_t r0 = c0; r0 < c1; r0 += kPanelRows) pack(r0, rows(r0), panel(r0), k0, k1);
      for (int64_t tile = 0; tile < n_tiles; tile += tiles_per_run) {
        const int count = static_cast<int>(std::min(tiles_per_run, n_tiles - tile));
        for (int64_t r0 = c0; r0 < c1; r0 += kPanelRows) run(panel(r0), r0, rows(r0), tile, count, k0, k1);
      }
    }
  }
}

// A run's 16 accumulators of one token tile: zero for the first slice, else the previous
// slices' sums from y (rows past `rows` were never stored; they stay zero).
inline void amx_start_acc(__m512 (&acc)[kAmxTokens], const float* y, int64_t ldy, int rows, bool first) {
  const auto mask = static_cast<__mmask16>((1u << rows) - 1);
#pragma GCC unroll 16
  for (int t = 0; t < kAmxTokens; ++t) acc[t] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, y + t * ldy);
}

// Activation tile of a 32-element block: 16 tokens x 32 bytes, then their 16 scales and
// their 16 sums (int32: Q4_1/Q5_1's min term).
constexpr size_t kQ8ActTile = kAmxTokens * 32 + 64 + 64;

// Activation tile of a 256-element block: 4 A tiles (16 tokens x 64 bytes each), the
// 16 tokens' scales, and for Q4_K/Q5_K their 16-sums added per sub-block and paired as
// the mins are (4 vectors, lane t: sums of sub-blocks 2i and 2i + 1 as int16).
constexpr size_t kKActTile = 4 * 1024 + 64 + 4 * 64;

// Token tiles [begin, end) of a batch's quantized rows, laid out for the tiles at
// `tiles` (tile i at i * the tile bytes).
inline void build_q8_act_tiles(const uint8_t* act, size_t act_stride, int64_t n_in, int64_t begin, int64_t end,
                               uint8_t* tiles) {
  const int64_t nb = n_in / 32;
  for (int64_t tile = begin; tile < end; ++tile)
    for (int t = 0; t < kAmxTokens; ++t) {
      const uint8_t* row = act + (kAmxTokens * tile + t) * act_stride;
      const auto* d = reinterpret_cast<const float*>(row + n_in);
      const auto* sums = reinterpret_cast<const int32_t*>(d + nb);
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* dst = tiles + (tile * nb + b) * kQ8ActTile;
        std::memcpy(dst + 32 * t, row + 32 * b, 32);
        reinterpret_cast<float*>(dst + kAmxTokens * 32)[t] = d[b];
        reinterpret_cast<int32_t*>(dst + kAmxTokens * 32 + 64)[t] = sums[b];
      }
    }
}

inline void build_k_act_tiles(const uint8_t* act, size_t act_stride, int64_t n_in, int64_t begin, int64_t end,
                              uint8_t* tiles) {
  const int64_t nb = n_in / kQK_K;
  for (int64_t tile = begin; tile < end; ++tile)
    for (int t = 0; t < kAmxTokens; ++t) {
      const auto* y = reinterpret_cast<const BlockQ8_K*>(act + (kAmxTokens * tile + t) * act_stride);
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* dst = tiles + (tile * nb + b) * kKActTile;
        for (int c = 0; c < 4; ++c) std::memcpy(dst + 1024 * c + 64 * t, y[b].qs + 64 * c, 64);
        reinterpret_cast<float*>(dst + 4096)[t] = y[b].d;
        auto* sums = reinterpret_cast<int16_t*>(dst + 4096 + 64);
        for (int s = 0; s < 8; ++s)
          sums[32 * (s / 2) + 2 * t + s % 2] = static_cast<int16_t>(y[b].bsums[2 * s] + y[b].bsums[2 * s + 1]);
      }
    }
}

}  // namespace
}  // namespace ridge::kernels
