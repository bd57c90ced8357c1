// The AMX-INT8 GEMM kernels (declared in amx.h) on 16-row panels: prefill and batches
// of two token tiles or more. The AVX-512 panels (avx512_panels.h) they reuse, and the
// one-token-tile kernels (amx_rows.cpp), share the layout of amx_layout.h. Design:
//
// The AVX-512 panels already hold 16 weight rows in the layout a tile's second operand
// wants: one 64-byte vector per 4 consecutive elements, lane r for row r. A tile B of
// 16 such vectors is 64 elements of 16 rows; tile A is 16 tokens' activation bytes, laid
// out contiguously per 16-token tile (once per matmul, GemmArgs::amx_tiles); C gets the
// 16 x 16 integer dots. So:
//
//  - Q8_0, Q4_0, Q5_0 (one f16 scale per 32 elements): the panel's unsigned bytes are
//    shifted back to signed values once per panel; per block one TDPBSSD of 32 elements,
//    then the block's int32 dots go through the same fma as the reference.
//  - Q4_K, Q5_K, Q6_K (integer sub-block scales inside a 256-element block): the scale
//    is folded into the weights, w = scale * q (Q6_K: scale * (q - 32)). That fits
//    16 bits, so it is split into bytes, w = 256 * hi + lo, and two tiles per 64
//    elements (lo unsigned, hi signed or unsigned) sum the whole block in integers:
//    isum = C_lo + 256 * C_hi, exactly the reference's sum of scale * group dot. The
//    mins of Q4_K/Q5_K come through the activations' 16-sums as in the AVX-512 panel.
//
// Tile registers hold no state between calls: each call loads its own configuration,
// so any thread (a new one, or one that ran the other family last) runs correctly.
#include <immintrin.h>

#include <chrono>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bitalg,amx-tile,amx-int8")
// GCC 12 reports its own AVX-512 intrinsics' _mm512_undefined_*() placeholders as
// "may be used uninitialized"; the values are always overwritten.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/gemm/amx_layout.h"
#include "kernels/gemm/avx512_bnb_panels.h"
#include "kernels/gemm/avx512_kquants.h"

namespace ridge::kernels {
namespace {

// ---- Q8_0, Q4_0, Q5_0 -----------------------------------------------------------------

// The 32-element panels the Q8_0-activation tile kernel runs on: per block 8 vectors of
// 16 rows x 4 signed bytes, then the rows' 16 float factors; after the blocks, optionally,
// the rows' final scales. Each source provides pack (signed bytes), the panel's bytes,
// and the AVX-512 kernel for what the tiles leave (bit-identical, so outputs do not
// depend on which ran).
template <class U8>
struct AmxQ8Source {  // Q8_0, Q4_0, Q5_0: the AVX-512 panel, q + 2^kShift shifted back to q
  using K = Q8Family<U8>;
  using U8Type = U8;
  static constexpr bool kOneTileRows = true;  // one token tile: gemm_amx_q8_rows
  static constexpr bool kRowScale = false;
  // Q4_1/Q5_1: q unsigned as stored (products as signed x unsigned bytes), and after the
  // block's scales its mins, whose term is the reference's second fma, m * sum(y).
  static constexpr bool kMin = U8::kMin;
  static constexpr size_t kBlock = K::kPanelBlock;
  static size_t panel_bytes(int64_t nb) { return static_cast<size_t>(nb) * K::kPanelBlock; }
  static void pack(const GemmArgs& a, int64_t r0, int rows, uint8_t* panel) {
    pack_panel<K>(a, r0, rows, panel);
    if constexpr (kMin) return;
    const __m512i offset = _mm512_set1_epi8(static_cast<char>(1 << U8::kShift));
    for (int64_t b = 0; b < a.n_in / 32; ++b) {
      uint8_t* blk = panel + b * K::kPanelBlock;
      for (int g = 0; g < 8; ++g)
        _mm512_store_si512(blk + 64 * g, _mm512_sub_epi8(_mm512_load_si512(blk + 64 * g), offset));
    }
  }
  static void rest(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<K>(a, n_rows, n_tokens); }
};
template <class F, GemmFn kRest>
struct AmxBnbSource {  // NF4, I8_ROWS: their AVX-512 panels, w + 128 flipped back to w
  static_assert(kBnbGroupBytes == Q8Family<U8Q4_0>::kPanelBlock, "the tiles read both panels alike");
  static constexpr bool kRowScale = true, kMin = false, kOneTileRows = false;
  static constexpr size_t kBlock = kBnbGroupBytes;
  static size_t panel_bytes(int64_t nb) { return bnb_panel_bytes(nb); }
  static void pack(const GemmArgs& a, int64_t r0, int rows, uint8_t* panel) {
    bnb_pack_panel<F>(a, r0, rows, panel);
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int64_t g = 0; g < a.n_in / 32; ++g) {
      uint8_t* blk = panel + g * kBnbGroupBytes;
      for (int k = 0; k < 8; ++k) _mm512_store_si512(blk + 64 * k, _mm512_xor_si512(_mm512_load_si512(blk + 64 * k), flip));
    }
  }
  static void rest(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { kRest(a, n_rows, n_tokens); }
};

// The one-token-tile entry of a 32-element type (amx_layout.h).
template <class U8>
constexpr GemmFn amx_rows_entry() {
  if constexpr (std::is_same_v<U8, U8Q8_0>) return gemm_amx_rows_q8_0;
  else if constexpr (std::is_same_v<U8, U8Q4_0>) return gemm_amx_rows_q4_0;
  else if constexpr (std::is_same_v<U8, U8Q5_0>) return gemm_amx_rows_q5_0;
  else if constexpr (std::is_same_v<U8, U8Q4_1>) return gemm_amx_rows_q4_1;
  else return gemm_amx_rows_q5_1;
}

// Tiles, per pipeline half: A (16 tokens x one block: 0, 1), B (the block's 8 panel
// vectors: 2, 3), C (16 tokens x 16 rows of int32: 4, 5).
template <class Src>
void gemm_amx_q8(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  constexpr size_t kBlock = Src::kBlock;  // a block's vectors, factors (and mins) in the panel
  const int64_t n_tiles = n_tokens / kAmxTokens, tiled = n_tiles * kAmxTokens;
  if (tiled < kAmxMinTokensQ8) return Src::rest(a, n_rows, n_tokens);
  if constexpr (Src::kOneTileRows)
    if (n_tiles == 1) return amx_rows_entry<typename Src::U8Type>()(a, n_rows, n_tokens);
  configure_tiles({{kAmxTokens, 32}, {kAmxTokens, 32}, {8, 64}, {8, 64}, {kAmxTokens, 64}, {kAmxTokens, 64}});
  const int64_t nb = a.n_in / 32;
  const uint8_t* acts = a.amx_tiles;
  if (acts == nullptr) {
    uint8_t* built = act_tile_buffer(static_cast<size_t>(n_tiles) * amx_act_tile_bytes(ActFormat::kQ8_0, a.n_in));
    build_q8_act_tiles(a.act, a.act_stride, a.n_in, 0, n_tiles, built);
    acts = built;
  }
  alignas(64) int32_t dots[2][kAmxTokens * kPanelRows];
  const auto pack = [&](int64_t r0, int rows, uint8_t* panel, int64_t, int64_t) { Src::pack(a, r0, rows, panel); };
  const auto run = [&](const uint8_t* panel, int64_t r0, int rows, int64_t tile, int, int64_t, int64_t) {
    const uint8_t* act = acts + tile * nb * kQ8ActTile;
    __m512 acc[kAmxTokens];
#pragma GCC unroll 16
    for (int t = 0; t < kAmxTokens; ++t) acc[t] = _mm512_setzero_ps();
    // The intrinsics paste tile numbers into the asm text: literals only.
#define RIDGE_AMX_Q8_ISSUE(TA, TB, TC)                                     \
  [&](int64_t b) {                                                        \
    RIDGE_TILE_LOAD(TA, act + b * kQ8ActTile, 32, kAmxTokens * 32);       \
    RIDGE_TILE_LOAD(TB, panel + b * kBlock, 64, 8 * 64);                  \
    _tile_zero(TC);                                                       \
    if constexpr (Src::kMin) _tile_dpbsud(TC, TA, TB);                    \
    else _tile_dpbssd(TC, TA, TB);                                        \
    RIDGE_TILE_STORE(TC, dots[TC - 4]);                                   \
  }
    const auto combine = [&](__m512(&acc)[kAmxTokens], int set, int64_t b) {
      const float* d = reinterpret_cast<const float*>(act + b * kQ8ActTile + kAmxTokens * 32);
      const __m512 dw = _mm512_load_ps(panel + b * kBlock + 8 * 64);
#pragma GCC unroll 16
      for (int t = 0; t < kAmxTokens; ++t)
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(dots[set] + kPanelRows * t)),
                                 _mm512_mul_ps(dw, _mm512_set1_ps(d[t])), acc[t]);
      if constexpr (Src::kMin) {
        const auto* sums = reinterpret_cast<const int32_t*>(d + kAmxTokens);
        const __m512 dm = _mm512_load_ps(panel + b * kBlock + 9 * 64);
#pragma GCC unroll 16
        for (int t = 0; t < kAmxTokens; ++t)
          acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(static_cast<float>(sums[t])), _mm512_mul_ps(dm, _mm512_set1_ps(d[t])),
                                   acc[t]);
      }
    };
    pipelined_blocks(nb, RIDGE_AMX_Q8_ISSUE(0, 2, 4), RIDGE_AMX_Q8_ISSUE(1, 3, 5), combine, acc);
#undef RIDGE_AMX_Q8_ISSUE
    if constexpr (Src::kRowScale) {
      const __m512 scale = _mm512_load_ps(panel + nb * kBlock);
#pragma GCC unroll 16
      for (int t = 0; t < kAmxTokens; ++t) acc[t] = _mm512_mul_ps(acc[t], scale);
    }
#pragma GCC unroll 16
    for (int t = 0; t < kAmxTokens; ++t) store_rows16(a.y + (kAmxTokens * tile + t) * a.ldy + r0, acc[t], rows);
  };
  // One slice: for the 32-element types slices measured slower (Q8_0 8960 x 1536, 512
  // tokens: 26.5-27.2 against 25.5-26.2 ms), and the panels of NF4 and I8_ROWS end in
  // per-row scales, applied after all blocks.
  amx_row_chunks(n_rows, n_tiles, 1, nb, nb, [](int64_t blocks) { return Src::panel_bytes(blocks); }, pack, run);
  if (tiled < n_tokens) Src::rest(tokens_from(a, tiled), n_rows, n_tokens - tiled);
}

// ---- Q4_K, Q5_K, Q6_K ----------------------------------------------------------------

// The AMX panel block of a K-quant family K: 64 vectors of the low bytes of w = scale *
// q, 64 of the high bytes (B tiles of 16 vectors each), then the float scales d (and for
// Q4_K/Q5_K 4 vectors of min pairs, lane r = mins 2i and 2i + 1 of row r as int16, and
// dmin).
template <class K>
struct AmxKBlock {
  static constexpr bool kSignedOffset = std::is_same_v<K, Q6K>;  // w = scale * (q - 32)
  static constexpr int kGroups = kSignedOffset ? 16 : 8;          // sub-blocks of 16 or 32
  static constexpr size_t kLo = 0, kHi = 64 * 64, kD = 2 * 64 * 64;
  static constexpr size_t kMins = kD + 64, kDmin = kMins + 4 * 64;  // Q4_K/Q5_K only: min pairs
  static constexpr size_t kBytes = kSignedOffset ? kD + 64 : kDmin + 64;

  // Block b of 16 rows: K's panel block (into `scratch`), then each vector scaled per
  // row and split into bytes. The 16-bit products are formed for the even and the odd
  // bytes in place (word lanes), so the bytes go back with shifts and masks, no shuffles.
  static void pack(const uint8_t* const (&w)[kPanelRows], int64_t b, uint8_t* scratch, uint8_t* dst) {
    K::pack_block(w, b, scratch);
    const __m512i low = _mm512_set1_epi16(0x00ff);
    const __m512i offset = _mm512_set1_epi16(kSignedOffset ? 32 : 0);
    constexpr int kVectors = 64 / kGroups;
    for (int g = 0; g < kGroups; ++g) {
      // int32 lanes holding int16 values: the row's scale in both words of its lane.
      const __m512i sc = _mm512_load_si512(scratch + K::kScales + 64 * g);
      const __m512i scale = _mm512_or_si512(_mm512_and_si512(sc, _mm512_set1_epi32(0xffff)), _mm512_slli_epi32(sc, 16));
      for (int v = kVectors * g; v < kVectors * (g + 1); ++v) {
        const __m512i q = _mm512_load_si512(scratch + 64 * v);
        const __m512i even = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_and_si512(q, low), offset), scale);
        const __m512i odd = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_srli_epi16(q, 8), offset), scale);
        // 0xd8 = c ? b : a, bitwise; c is the mask of the low bytes.
        _mm512_store_si512(dst + kLo + 64 * v, _mm512_ternarylogic_epi32(_mm512_slli_epi16(odd, 8), even, low, 0xd8));
        _mm512_store_si512(dst + kHi + 64 * v, _mm512_ternarylogic_epi32(odd, _mm512_srli_epi16(even, 8), low, 0xd8));
      }
    }
    std::memcpy(dst + kD, scratch + K::kD, 64);
    if constexpr (!kSignedOffset) {
      // K's min vectors hold min s twice per lane; here lane r pairs mins 2i and 2i + 1.
      for (int i = 0; i < 4; ++i)
        _mm512_store_si512(dst + kMins + 64 * i,
                           _mm512_mask_blend_epi16(0xaaaaaaaa, _mm512_load_si512(scratch + K::kMins + 64 * (2 * i)),
                                                   _mm512_load_si512(scratch + K::kMins + 64 * (2 * i + 1))));
      std::memcpy(dst + kDmin, scratch + K::kDmin, 64);
    }
  }
};

// Token tiles in pairs (run_two), an odd last one alone (run_one); every tile is
// 16 x 64 bytes in both.
template <class K>
void gemm_amx_k(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  using P = AmxKBlock<K>;
  const int64_t n_tiles = n_tokens / kAmxTokens, tiled = n_tiles * kAmxTokens;
  if (tiled < kAmxMinTokensK) {
    if constexpr (std::is_same_v<K, QK4<false>> || std::is_same_v<K, QK4<true>>)
      if (n_tiles == 1)
        return (std::is_same_v<K, QK4<true>> ? gemm_amx_rows_q5_k : gemm_amx_rows_q4_k)(a, n_rows, n_tokens);
    if constexpr (std::is_same_v<K, Q6K>)
      if (n_tiles == 1) return gemm_amx_rows_q6_k(a, n_rows, n_tokens);
    return gemm<K>(a, n_rows, n_tokens);
  }
  configure_tiles({{16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}});
  const int64_t nb = a.n_in / kQK_K;
  const uint8_t* acts = a.amx_tiles;
  if (acts == nullptr) {
    uint8_t* built = act_tile_buffer(static_cast<size_t>(n_tiles) * amx_act_tile_bytes(ActFormat::kQ8_K, a.n_in));
    build_k_act_tiles(a.act, a.act_stride, a.n_in, 0, n_tiles, built);
    acts = built;
  }
  alignas(64) uint8_t scratch[K::kPanelBlock];
  // Integer dots of a block, per pipeline set: for token tiles 0 and 1 of a run, the
  // low-byte and the high-byte sums (16 tokens x 16 rows of int32 each).
  alignas(64) int32_t dots[2][4][kAmxTokens * kPanelRows];
  const auto pack = [&](int64_t r0, int rows, uint8_t* panel, int64_t k0, int64_t k1) {
    const uint8_t* w[kPanelRows];
    for (int r = 0; r < kPanelRows; ++r) w[r] = a.w + (r0 + std::min(r, rows - 1)) * a.w_stride;
    for (int64_t b = k0; b < k1; ++b) {
      prefetch_ahead<kPanelRows>(a, r0, b, K::kBlockBytes);
      P::pack(w, b, scratch, panel + (b - k0) * P::kBytes);
    }
  };
  // Block b's integer dots of one token tile (lo, hi) into its 16 accumulators, with the
  // float scales (and the mins) as the reference applies them.
  const auto combine = [&](__m512(&acc)[kAmxTokens], const int32_t* lo, const int32_t* hi, const uint8_t* blk,
                           const uint8_t* act) {
    const auto* dy = reinterpret_cast<const float*>(act + 4096);
    [[maybe_unused]] const auto* sums = reinterpret_cast<const int32_t*>(act + 4096 + 64);
    const __m512 dv = _mm512_load_ps(blk + P::kD);
    [[maybe_unused]] __m512i mins[4];
    [[maybe_unused]] __m512 dminv;
    if constexpr (!P::kSignedOffset) {
      for (int i = 0; i < 4; ++i) mins[i] = _mm512_load_si512(blk + P::kMins + 64 * i);
      dminv = _mm512_load_ps(blk + P::kDmin);
    }
#pragma GCC unroll 16
    for (int t = 0; t < kAmxTokens; ++t) {
      const __m512i isum = _mm512_add_epi32(_mm512_load_si512(lo + kPanelRows * t),
                                            _mm512_slli_epi32(_mm512_load_si512(hi + kPanelRows * t), 8));
      const __m512 d = _mm512_set1_ps(dy[t]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dv, d), acc[t]);
      if constexpr (!P::kSignedOffset) {
        __m512i imin = _mm512_setzero_si512();
        for (int i = 0; i < 4; ++i)
          imin = _mm512_dpwssd_epi32(imin, mins[i], _mm512_set1_epi32(sums[kAmxTokens * i + t]));
        acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(dminv, d), acc[t]);
      }
    }
  };
  // Low bytes are unsigned; high bytes signed for Q6_K, unsigned (0..7) otherwise.
#define RIDGE_AMX_K_HI(C, A, B)                       \
  if constexpr (P::kSignedOffset) _tile_dpbssd(C, A, B); \
  else _tile_dpbsud(C, A, B)
  // One token tile: tiles A (16 tokens x 64 elements: 0 and 3), B (low and high bytes of
  // 64 elements: 1 and 2, 4 and 5), C (the low and high dots over the whole block: 6 and
  // 7). Two sets of operand tiles take the chunks in turn, so a chunk's loads need not
  // wait for the previous chunk's dots to finish reading the tiles (with one set: a third
  // of this speed with the scales left out).
  const auto run_one = [&](const uint8_t* panel, int64_t r0, int rows, int64_t tile, int64_t k0, int64_t n) {
    const uint8_t* acts_tile = acts + (tile * nb + k0) * kKActTile;
    float* y = a.y + kAmxTokens * tile * a.ldy + r0;
    __m512 acc[kAmxTokens];
    amx_start_acc(acc, y, a.ldy, rows, k0 == 0);
    const auto issue = [&](int64_t b, int set) {
      const uint8_t* blk = panel + b * P::kBytes;
      const uint8_t* act = acts_tile + b * kKActTile;
      _tile_zero(6);
      _tile_zero(7);
      for (int c = 0; c < 4; c += 2) {
        RIDGE_TILE_LOAD(0, act + 1024 * c, 64, 1024);
        RIDGE_TILE_LOAD(1, blk + P::kLo + 1024 * c, 64, 1024);
        RIDGE_TILE_LOAD(2, blk + P::kHi + 1024 * c, 64, 1024);
        RIDGE_TILE_LOAD(3, act + 1024 * (c + 1), 64, 1024);
        RIDGE_TILE_LOAD(4, blk + P::kLo + 1024 * (c + 1), 64, 1024);
        RIDGE_TILE_LOAD(5, blk + P::kHi + 1024 * (c + 1), 64, 1024);
        _tile_dpbsud(6, 0, 1);
        RIDGE_AMX_K_HI(7, 0, 2);
        _tile_dpbsud(6, 3, 4);
        RIDGE_AMX_K_HI(7, 3, 5);
      }
      RIDGE_TILE_STORE(6, dots[set][0]);
      RIDGE_TILE_STORE(7, dots[set][1]);
    };
    // As pipelined_blocks: the tiles of block b + 1 are issued before block b's scales
    // apply. The C tiles are the same for both; their dots go to alternate buffers.
    issue(0, 0);
    for (int64_t b = 0; b < n; ++b) {
      if (b + 1 < n) issue(b + 1, static_cast<int>((b + 1) % 2));
      const int set = static_cast<int>(b % 2);
      combine(acc, dots[set][0], dots[set][1], panel + b * P::kBytes, acts_tile + b * kKActTile);
    }
#pragma GCC unroll 16
    for (int t = 0; t < kAmxTokens; ++t) store_rows16(y + t * a.ldy, acc[t], rows);
  };
  // Two token tiles over each weight tile load: A 0 and 1 (the two token tiles), B 2 and
  // 3 (low and high bytes), C 4 and 5 (token tile 0's low and high dots), 6 and 7 (token
  // tile 1's). Each chunk's B tiles feed four products instead of two, halving the weight
  // bytes loaded per product, which bound the one-tile form (dropping its high-byte loads
  // alone sped it up by a sixth on Q4_K, a third on Q6_K). With one set of operand
  // tiles, each load of the next chunk follows the last product reading its tile.
  const auto run_two = [&](const uint8_t* panel, int64_t r0, int rows, int64_t tile, int64_t k0, int64_t n) {
    const uint8_t* acts0 = acts + (tile * nb + k0) * kKActTile;
    const uint8_t* acts1 = acts0 + nb * kKActTile;
    float* y0 = a.y + kAmxTokens * tile * a.ldy + r0;
    float* y1 = y0 + kAmxTokens * a.ldy;
    __m512 acc0[kAmxTokens], acc1[kAmxTokens];
    amx_start_acc(acc0, y0, a.ldy, rows, k0 == 0);
    amx_start_acc(acc1, y1, a.ldy, rows, k0 == 0);
    const auto issue = [&](int64_t b, int set) {
      const uint8_t* blk = panel + b * P::kBytes;
      const uint8_t* x0 = acts0 + b * kKActTile;
      const uint8_t* x1 = acts1 + b * kKActTile;
      _tile_zero(4);
      _tile_zero(5);
      _tile_zero(6);
      _tile_zero(7);
      RIDGE_TILE_LOAD(0, x0, 64, 1024);
      RIDGE_TILE_LOAD(2, blk + P::kLo, 64, 1024);
      RIDGE_TILE_LOAD(1, x1, 64, 1024);
      RIDGE_TILE_LOAD(3, blk + P::kHi, 64, 1024);
      for (int c = 0; c < 4; ++c) {
        const bool next = c + 1 < 4;
        _tile_dpbsud(4, 0, 2);
        RIDGE_AMX_K_HI(5, 0, 3);
        if (next) RIDGE_TILE_LOAD(0, x0 + 1024 * (c + 1), 64, 1024);
        _tile_dpbsud(6, 1, 2);
        if (next) RIDGE_TILE_LOAD(2, blk + P::kLo + 1024 * (c + 1), 64, 1024);
        RIDGE_AMX_K_HI(7, 1, 3);
        if (next) {
          RIDGE_TILE_LOAD(1, x1 + 1024 * (c + 1), 64, 1024);
          RIDGE_TILE_LOAD(3, blk + P::kHi + 1024 * (c + 1), 64, 1024);
        }
      }
      RIDGE_TILE_STORE(4, dots[set][0]);
      RIDGE_TILE_STORE(5, dots[set][1]);
      RIDGE_TILE_STORE(6, dots[set][2]);
      RIDGE_TILE_STORE(7, dots[set][3]);
    };
    issue(0, 0);
    for (int64_t b = 0; b < n; ++b) {
      if (b + 1 < n) issue(b + 1, static_cast<int>((b + 1) % 2));
      const int set = static_cast<int>(b % 2);
      const uint8_t* blk = panel + b * P::kBytes;
      combine(acc0, dots[set][0], dots[set][1], blk, acts0 + b * kKActTile);
      combine(acc1, dots[set][2], dots[set][3], blk, acts1 + b * kKActTile);
    }
#pragma GCC unroll 16
    for (int t = 0; t < kAmxTokens; ++t) {
      store_rows16(y0 + t * a.ldy, acc0[t], rows);
      store_rows16(y1 + t * a.ldy, acc1[t], rows);
    }
  };
#undef RIDGE_AMX_K_HI
  const auto run = [&](const uint8_t* panel, int64_t r0, int rows, int64_t tile, int count, int64_t k0, int64_t k1) {
    if (count == 2) run_two(panel, r0, rows, tile, k0, k1 - k0);
    else run_one(panel, r0, rows, tile, k0, k1 - k0);
  };
  const int64_t slice = amx_slice_blocks(nb, static_cast<int64_t>(kAmxSliceBytes / (n_tiles * kKActTile)));
  amx_row_chunks(n_rows, n_tiles, 2, nb, slice, [](int64_t blocks) { return static_cast<size_t>(blocks) * P::kBytes; },
                 pack, run);
  if (tiled < n_tokens) gemm<K>(tokens_from(a, tiled), n_rows, n_tokens - tiled);
}

// ---- the throughput probe --------------------------------------------------------------

// TDPBSSDs into 4 independent accumulators from fixed A and B tiles: the issue rate alone.
// Returns the multiply-adds done in about `seconds`, and the time they took. (The tile
// intrinsics are volatile asm: the loop is not optimized away.)
inline std::pair<double, double> amx_probe_thread(double seconds) {
  configure_tiles({{16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}});
  alignas(64) int8_t zeros[16 * 64] = {};
  _tile_loadd(0, zeros, 64);
  _tile_loadd(1, zeros, 64);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  constexpr int kInner = 1024;  // 4 TDPBSSDs each
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0, macs = 0;
  while (elapsed < seconds) {
    for (int i = 0; i < kInner; ++i) {
      _tile_dpbssd(2, 0, 1);
      _tile_dpbssd(3, 0, 1);
      _tile_dpbssd(4, 0, 1);
      _tile_dpbssd(5, 0, 1);
    }
    macs += 4.0 * kInner * 16 * 16 * 64;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  _tile_release();
  return {macs, elapsed};
}

}  // namespace

namespace {

template <GemmFn kFn>
void amx_entry(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  if (!amx_usable()) throw Error(str_cat("gemm: an AMX kernel was called but ", amx_status()));
  kFn(a, n_rows, n_tokens);
}

}  // namespace

void gemm_q8_0_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  amx_entry<gemm_amx_q8<AmxQ8Source<U8Q8_0>>>(a, n_rows, n_tokens);
}
void gemm_q4_0_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  amx_entry<gemm_amx_q8<AmxQ8Source<U8Q4_0>>>(a, n_rows, n_tokens);
}
void gemm_q5_0_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  amx_entry<gemm_amx_q8<AmxQ8Source<U8Q5_0>>>(a, n_rows, n_tokens);
}
void gemm_q4_1_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  amx_entry<gemm_amx_q8<AmxQ8Source<U8Q4_1>>>(a, n_rows, n_tokens);
}
void gemm_q5_1_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  amx_entry<gemm_amx_q8<AmxQ8Source<U8Q5_1>>>(a, n_rows, n_tokens);
}
void gemm_nf4_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  amx_entry<gemm_amx_q8<AmxBnbSource<Nf4Panel, gemm_nf4_avx512>>>(a, n_rows, n_tokens);
}
void gemm_i8_rows_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  amx_entry<gemm_amx_q8<AmxBnbSource<I8RowsPanel, gemm_i8_rows_avx512>>>(a, n_rows, n_tokens);
}
void gemm_q4_k_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { amx_entry<gemm_amx_k<QK4<false>>>(a, n_rows, n_tokens); }
void gemm_q5_k_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { amx_entry<gemm_amx_k<QK4<true>>>(a, n_rows, n_tokens); }
void gemm_q6_k_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { amx_entry<gemm_amx_k<Q6K>>(a, n_rows, n_tokens); }

size_t amx_act_tile_bytes(ActFormat format, int64_t n_in) {
  if (format == ActFormat::kQ8_0) return static_cast<size_t>(n_in / 32) * kQ8ActTile;
  if (format == ActFormat::kQ8_K) return static_cast<size_t>(n_in / kQK_K) * kKActTile;
  throw Error("amx_act_tile_bytes: the AMX kernels take Q8_0 or Q8_K activations");
}

void amx_build_act_tiles(ActFormat format, const uint8_t* act, size_t act_stride, int64_t n_in, int64_t begin,
                         int64_t end, uint8_t* tiles) {
  if (format == ActFormat::kQ8_0) return build_q8_act_tiles(act, act_stride, n_in, begin, end, tiles);
  if (format == ActFormat::kQ8_K) return build_k_act_tiles(act, act_stride, n_in, begin, end, tiles);
  throw Error("amx_build_act_tiles: the AMX kernels take Q8_0 or Q8_K activations");
}

double amx_int8_peak_ops_per_s(int threads, double seconds) {
  if (!amx_usable() || threads < 1) return 0;
  std::vector<std::pair<double, double>> runs(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back([&runs, i, seconds] { runs[i] = amx_probe_thread(seconds); });
  for (auto& thread : pool) thread.join();
  double ops = 0;
  for (const auto& [macs, elapsed] : runs) ops += 2 * macs / elapsed;
  return ops;
}

}  // namespace ridge::kernels
