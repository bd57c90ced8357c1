// The AMX-INT8 kernels for one token tile (16-31 tokens: batched decode), declared in
// amx_layout.h, whose activation tile layout they read; the panel kernels
// (amx_panels.cpp: gemm_amx_q8, gemm_amx_k) hand them a single tile. Design: the
// comment on gemm_amx_k4_rows below, and docs/notes/amx-int8.md ("AMX-INT8: batched
// decode, the weight rows as tile A").
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bitalg,amx-tile,amx-int8")
// GCC 12 reports its own AVX-512 intrinsics' _mm512_undefined_*() placeholders as
// "may be used uninitialized"; the values are always overwritten.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/gemm/amx_layout.h"
#include "kernels/gemm/avx512_kquants.h"

namespace ridge::kernels {
namespace {

// ---- Q4_K and Q5_K for one token tile: the weight rows as tile A -------------------

// A batch of 16-31 tokens (batched decode) is one token tile, so each weight serves 16
// tokens. The panel form (gemm/amx_panels.cpp) repays its per-panel work (rows transposed
// into lanes, the scales folded into 16-bit weights) over many token tiles; over one it
// costs as much as the AVX-512 kernels. Here the weight rows are tile A as they lie: a
// row's 64 bytes of nibbles become two 64-byte A rows with an and and a shift, nothing
// transposed, nothing multiplied; the activations, transposed once per call, are tile B.
// Each 32-element sub-block is a TDPBUSD of its own, 16 rows x 16 tokens of int32 dots,
// and its 6-bit scale applies in float: a dot is at most 32 x 15 x 128 = 61440 and scale
// x dot at most 63 x 61440, so each half-block's sum of four is an integer below 2^24,
// exact in float, and the two halves' float sum rounds as float(sumi) does. With the
// mins through the activations' 16-sums (vpdpwssd) and the fmas in the reference's
// order, every output equals the scalar reference bit for bit.
//
// Tiles: A (16 rows x 32 bytes: 0, 1), B (8 rows of 16 tokens x 4 bytes: 2, 3), C (4,
// 5); the even and odd sub-blocks alternate between the two sets.
constexpr int64_t kKRowsBlockBytes = 4 * 1024;  // a block's A rows, and its B tiles

// The batch's one token tile of activations in the panel kernels' tile layout: the
// caller's (GemmArgs::amx_tiles), or laid out here in a per-thread buffer.
inline const uint8_t* one_tile_acts(const GemmArgs& a, ActFormat format) {
  if (a.amx_tiles != nullptr) return a.amx_tiles;
  uint8_t* built = act_tile_buffer(amx_act_tile_bytes(format, a.n_in));
  amx_build_act_tiles(format, a.act, a.act_stride, a.n_in, 0, 1, built);
  return built;
}

// The activations of one token tile as tile B (16 tokens x 4 bytes per row), for every
// block: chunk c's 16 tokens x 16 dwords of the tile layout above, transposed, at 1024 c
// of the block's kKRowsBlockBytes. Rows 0-7 are B of the chunk's first 32 elements, rows
// 8-15 of its second; all 16, B of its 64.
inline void build_k_rows_b(const uint8_t* acts, int64_t nb, uint8_t* bt) {
  for (int64_t b = 0; b < nb; ++b)
    for (int c = 0; c < 4; ++c) {
      const uint8_t* rows[kAmxTokens];
      for (int t = 0; t < kAmxTokens; ++t) rows[t] = acts + b * kKActTile + 1024 * c + 64 * t;
      for (int half = 0; half < 2; ++half) {
        __m512i out[8];
        load_transposed(rows, 32 * half, out);
        for (int k = 0; k < 8; ++k) _mm512_store_si512(bt + b * kKRowsBlockBytes + 1024 * c + 512 * half + 64 * k, out[k]);
      }
    }
}

// Q8_0 activations likewise: B of block b at 512 b, the tile's 16 tokens x 8 dwords,
// transposed.
inline void build_q8_rows_b(const uint8_t* acts, int64_t nb, uint8_t* bt) {
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rows[kAmxTokens];
    for (int t = 0; t < kAmxTokens; ++t) rows[t] = acts + b * kQ8ActTile + 32 * t;
    __m512i out[8];
    load_transposed(rows, 0, out);
    for (int k = 0; k < 8; ++k) _mm512_store_si512(bt + 512 * b + 64 * k, out[k]);
  }
}

// Bytes of the B layout above for n_in elements.
inline size_t rows_b_bytes(ActFormat format, int64_t n_in) {
  return format == ActFormat::kQ8_K ? static_cast<size_t>(n_in / kQK_K) * kKRowsBlockBytes
                                    : static_cast<size_t>(n_in / 32) * 512;
}

// The B layout of a call: the caller's (GemmArgs::amx_rows_b, laid out once per matmul),
// or built here from `acts` in a per-thread buffer.
inline const uint8_t* rows_b(const GemmArgs& a, ActFormat format, const uint8_t* acts) {
  if (a.amx_rows_b != nullptr) return a.amx_rows_b;
  uint8_t* bt = thread_buffer<2>(rows_b_bytes(format, a.n_in), "activation tiles, transposed");
  if (format == ActFormat::kQ8_K) build_k_rows_b(acts, a.n_in / kQK_K, bt);
  else build_q8_rows_b(acts, a.n_in / 32, bt);
  return bt;
}

// The 16 weight rows after the next 16 (contiguous bytes) into L2, in nb x 16 parts, one
// after each row's work in a block step. Measured on Qwen2.5 1.5B's ffn_up streamed from
// memory (16 tokens, one thread): 1.2 ms, against 1.3 ms for the next 16 rows into L1 and
// 1.9 ms for them into L1 a block step's share at a time (prefetch_ahead), whose bursts
// held up the row loads behind them. Parts come in order, so part k ends at line
// floor(k x lines / parts) by a running remainder: the two 64-bit divisions per part it
// took before were a quarter of the Q8_0 kernel's samples (Gemma's 640-wide output rows,
// 20 blocks: 32 divisions per block of one tile product).
struct RowsAhead {
  const char* rows;
  size_t lines, parts;
  size_t next = 0, remainder = 0;  // lines prefetched; parts done x lines, modulo parts
  RowsAhead(const GemmArgs& a, int64_t r0, int64_t nb)
      : rows(reinterpret_cast<const char*>(a.w + (r0 + 2 * kPanelRows) * a.w_stride)),
        lines((kPanelRows * a.w_stride + 63) / 64),
        parts(static_cast<size_t>(nb) * kPanelRows) {}
  void operator()() {
    remainder += lines;
    for (; remainder >= parts; remainder -= parts) prefetch_l2(rows + 64 * next++);
  }
};

// Q5_K (kFifthBit) the same way, each weight's fifth bit from qh added into its A byte
// (q up to 31). Its dots reach 32 x 31 x 128 = 126976, so only pairs of scaled dots stay
// below 2^24 (exact in float): the four pair sums are added as integers, and the block's
// sum converted once, as float(sumi) does.
template <bool kFifthBit>
void gemm_amx_k4_rows(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  using Block = std::conditional_t<kFifthBit, BlockQ5_K, BlockQ4_K>;
  static_assert(offsetof(Block, scales) == offsetof(BlockQ4_K, scales), "d, dmin and scales lead both blocks");
  const int64_t nb = a.n_in / kQK_K;
  configure_tiles({{16, 32}, {16, 32}, {8, 64}, {8, 64}, {16, 64}, {16, 64}});
  const uint8_t* acts = one_tile_acts(a, ActFormat::kQ8_K);
  const uint8_t* bt = rows_b(a, ActFormat::kQ8_K, acts);
  // Per pipeline set (3: a block is unpacked while the one before it runs on the tiles
  // and the one before that is combined): the block's A rows (4 regions of 16 rows x 64
  // bytes: the low and the high nibbles of qs[0..63], then of qs[64..127]), each row's
  // float scales, min pairs (int16), and d and dmin (interleaved). Per dot set (2): the
  // sub-blocks' dots, 16 rows x 16 tokens each.
  alignas(64) uint8_t arows[3][kKRowsBlockBytes];
  alignas(64) float scales[3][kPanelRows * 8];
  alignas(64) int32_t min_pairs[3][kPanelRows * 4];
  alignas(64) float d_dmin[3][kPanelRows * 2];
  alignas(64) int32_t dots[2][8][kAmxTokens * kPanelRows];
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  // Q5_K: the qh bit of each byte of an A row. Region h's low nibbles are sub-blocks 4 h
  // (bytes 0-31) and 4 h + 2 (32-63), its high nibbles 4 h + 1 and 4 h + 3; sub-block g's
  // bit is bit g of qh[l].
  [[maybe_unused]] __m512i fifth_bit[2][2];
  for (int h = 0; h < 2; ++h)
    for (int high = 0; high < 2; ++high)
      fifth_bit[h][high] = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (4 * h + high))),
                                              _mm256_set1_epi8(static_cast<char>(1 << (4 * h + 2 + high))), 1);
  for (int64_t r0 = 0; r0 < n_rows; r0 += kPanelRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, n_rows - r0));
    const Block* w[kPanelRows];
    for (int r = 0; r < kPanelRows; ++r) w[r] = reinterpret_cast<const Block*>(a.w + (r0 + std::min(r, rows - 1)) * a.w_stride);
    // Row r of block b into set `set`: its nibbles as A rows; at every fourth row, the
    // scales, mins, d and dmin of that row and the next three, one row per 128-bit lane
    // (a row at a time, they were 5-8% of the kernel).
    const auto unpack_row = [&](int64_t b, int set, int r) {
      const Block& blk = w[r][b];
      uint8_t* dst = arows[set];
      [[maybe_unused]] __m512i qh;  // Q5_K: the row's 32 qh bytes in both halves
      if constexpr (kFifthBit) qh = _mm512_broadcast_i64x4(load256(blk.qh));
      for (int h = 0; h < 2; ++h) {
        const __m512i q = _mm512_loadu_si512(blk.qs + 64 * h);
        __m512i lo = _mm512_and_si512(q, low4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
        if constexpr (kFifthBit) {
          const __m512i sixteen = _mm512_set1_epi8(16);
          lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(qh, fifth_bit[h][0]), lo, sixteen);
          hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(qh, fifth_bit[h][1]), hi, sixteen);
        }
        _mm512_store_si512(dst + 2048 * h + 64 * r, lo);
        _mm512_store_si512(dst + 2048 * h + 1024 + 64 * r, hi);
      }
      if (r % 4 != 0) return;
      const Block* const blks[4] = {&blk, &w[r + 1][b], &w[r + 2][b], &w[r + 3][b]};
      // Qwords: the rows' 8 scales, then their 8 mins.
      const __m512i sm = _mm512_permutexvar_epi64(
          _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7),
          scales_mins_k4_x4(blks[0]->scales, blks[1]->scales, blks[2]->scales, blks[3]->scales));
      _mm512_store_ps(scales[set] + 8 * r, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(sm))));
      _mm512_store_ps(scales[set] + 8 * r + 16,
                      _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(sm, 1))));
      _mm512_store_si512(min_pairs[set] + 4 * r, _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(sm, 1)));
      uint32_t dm[4];  // d and dmin: the blocks' first 4 bytes
      for (int i = 0; i < 4; ++i) std::memcpy(&dm[i], blks[i], sizeof(uint32_t));
      _mm256_store_ps(d_dmin[set] + 2 * r, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dm))));
    };
    // Sub-block s of block b: A rows from region 2 (s / 4) + s % 2 of the set, bytes
    // 32 ((s / 2) % 2) of each row; B from the transposed activations; the dots into
    // dots[dset][s]. Even sub-blocks take tiles 0, 2, 4, odd ones 1, 3, 5.
#define RIDGE_AMX_K4_ROWS_ISSUE(TA, TB, TC)                                                                \
  RIDGE_TILE_LOAD(TA, arows[set] + 1024 * (2 * (s / 4) + s % 2) + 32 * ((s / 2) % 2), 64, 1024 - 32); \
  RIDGE_TILE_LOAD(TB, bt + b * kKRowsBlockBytes + 512 * s, 64, 512);                                  \
  _tile_zero(TC);                                                                                      \
  _tile_dpbusd(TC, TA, TB);                                                                            \
  RIDGE_TILE_STORE(TC, dots[dset][s])
    const auto issue = [&](int64_t b, int s, int set, int dset) {
      if (s % 2 == 0) {
        RIDGE_AMX_K4_ROWS_ISSUE(0, 2, 4);
      } else {
        RIDGE_AMX_K4_ROWS_ISSUE(1, 3, 5);
      }
    };
#undef RIDGE_AMX_K4_ROWS_ISSUE
    RowsAhead prefetch_part(a, r0, nb);
    __m512 acc[kPanelRows];  // row r's 16 tokens
#pragma GCC unroll 16
    for (int r = 0; r < kPanelRows; ++r) acc[r] = _mm512_setzero_ps();
    // Three blocks in flight: in the step for block b, block b + 1's sub-blocks go to the
    // tiles, block b's dots take their scales (row by row), and block b + 2's rows are
    // unpacked, each interleaved with the others row by row, so that the tile unit and
    // the vector unit both have work within the reorder window (with the three phases
    // one after the other, the step took the sum of their times). A tile load reads rows
    // unpacked a whole step before, after the stores have reached the cache.
    const auto set_of = [](int64_t b) { return static_cast<int>(b % 3); };
    for (int r = 0; r < kPanelRows; ++r) unpack_row(0, 0, r);
    for (int r = 0; r < kPanelRows && nb > 1; ++r) unpack_row(1, 1, r);
    for (int s = 0; s < 8; ++s) issue(0, s, 0, 0);
    for (int64_t b = 0; b < nb; ++b) {
      const int set = set_of(b), dset = static_cast<int>(b % 2);
      const bool next = b + 1 < nb, ahead = b + 2 < nb;
      const uint8_t* act = acts + b * kKActTile;
      const __m512 dy = _mm512_loadu_ps(act + 4096);  // a.amx_tiles need not be aligned
      __m512i sums[4];
      for (int i = 0; i < 4; ++i) sums[i] = _mm512_loadu_si512(act + 4096 + 64 + 64 * i);
#pragma GCC unroll 16
      for (int r = 0; r < kPanelRows; ++r) {
        if (next && r % 2 == 0) issue(b + 1, r / 2, set_of(b + 1), 1 - dset);
        prefetch_part();  // part b * kPanelRows + r
        const float* sc = scales[set] + 8 * r;
        const auto term = [&](int s) { return _mm512_cvtepi32_ps(_mm512_load_si512(dots[dset][s] + kAmxTokens * r)); };
        __m512 sumi;  // float(sumi) of the reference
        if constexpr (kFifthBit) {
          const auto pair = [&](int s) {  // scale x dot of sub-blocks s and s + 1: below 2^24, exact
            return _mm512_cvtps_epi32(
                _mm512_fmadd_ps(term(s + 1), _mm512_set1_ps(sc[s + 1]), _mm512_mul_ps(term(s), _mm512_set1_ps(sc[s]))));
          };
          sumi = _mm512_cvtepi32_ps(
              _mm512_add_epi32(_mm512_add_epi32(pair(0), pair(2)), _mm512_add_epi32(pair(4), pair(6))));
        } else {
          __m512 lo = _mm512_mul_ps(term(0), _mm512_set1_ps(sc[0]));
          __m512 hi = _mm512_mul_ps(term(4), _mm512_set1_ps(sc[4]));
          for (int s = 1; s < 4; ++s) {
            lo = _mm512_fmadd_ps(term(s), _mm512_set1_ps(sc[s]), lo);
            hi = _mm512_fmadd_ps(term(4 + s), _mm512_set1_ps(sc[4 + s]), hi);
          }
          sumi = _mm512_add_ps(lo, hi);
        }
        __m512i imin = _mm512_setzero_si512();
        for (int i = 0; i < 4; ++i) imin = _mm512_dpwssd_epi32(imin, sums[i], _mm512_set1_epi32(min_pairs[set][4 * r + i]));
        acc[r] = _mm512_fmadd_ps(sumi, _mm512_mul_ps(_mm512_set1_ps(d_dmin[set][2 * r]), dy), acc[r]);
        acc[r] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(_mm512_set1_ps(d_dmin[set][2 * r + 1]), dy),
                                  acc[r]);
        if (ahead) unpack_row(b + 2, set_of(b + 2), r);
      }
    }
    transpose16x16_ps(acc);  // now token t's 16 rows
#pragma GCC unroll 16
    for (int t = 0; t < kAmxTokens; ++t) store_rows16(a.y + t * a.ldy + r0, acc[t], rows);
  }
  if (n_tokens > kAmxTokens) gemm<QK4<kFifthBit>>(tokens_from(a, kAmxTokens), n_rows, n_tokens - kAmxTokens);
}

// Q6_K the same way, its sub-block scales folded into the weights as the panel form
// does (16-element sub-blocks with int8 scales would take 16 tiles and as many stores
// of dots per block): w = scale x (q - 32), at most 13 bits, split into bytes w = 256 hi
// + lo, so that two TDPBs per 64 elements (lo unsigned, hi signed) sum the whole block
// in integers, isum = C_lo + 256 C_hi, exactly the reference's sumi. Tiles: A lo, A hi
// and B (0, 1, 2 for even chunks, 3, 4, 5 for odd ones), C lo and hi (6, 7).
void gemm_amx_q6_k_rows(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  using Block = BlockQ6_K;
  const int64_t nb = a.n_in / kQK_K;
  configure_tiles({{16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}});
  const uint8_t* acts = one_tile_acts(a, ActFormat::kQ8_K);
  const uint8_t* bt = rows_b(a, ActFormat::kQ8_K, acts);
  // Per pipeline set (3, as for Q4_K): the block's A rows, 64 elements a chunk, the low
  // bytes of chunk c at 2048 c and the high bytes at 2048 c + 1024 (16 rows x 64 bytes
  // each); each row's d. Per dot set: the block's lo and hi dots.
  constexpr size_t kARows = 2 * kKRowsBlockBytes;
  alignas(64) uint8_t arows[3][kARows];
  alignas(64) float dw[3][kPanelRows];
  alignas(64) int32_t dots[2][2][kAmxTokens * kPanelRows];
  const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
  const __m512i low_bytes = _mm512_set1_epi16(0x00ff), offset = _mm512_set1_epi16(32);
  // Shifts of the broadcast qh bytes that bring quarter q's two bits to bits 4-5: left by
  // 4 and 2 (quarters 0, 1: chunk 2 h), right by 0 and 2 (quarters 2, 3: chunk 2 h + 1).
  const __m512i up = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i down = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  // Word i of chunk c covers elements 2 i and 2 i + 1: sub-block 4 c + i / 8's scale.
  __m512i pick_scale[4];
  for (int c = 0; c < 4; ++c) {
    alignas(64) int16_t idx[32];
    for (int i = 0; i < 32; ++i) idx[i] = static_cast<int16_t>(4 * c + i / 8);
    pick_scale[c] = _mm512_load_si512(idx);
  }
  for (int64_t r0 = 0; r0 < n_rows; r0 += kPanelRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, n_rows - r0));
    const Block* w[kPanelRows];
    for (int r = 0; r < kPanelRows; ++r) w[r] = reinterpret_cast<const Block*>(a.w + (r0 + std::min(r, rows - 1)) * a.w_stride);
    // Row r of block b into set `set`: q (0..63) in element order, then scale x (q - 32)
    // as 16-bit words for the even and the odd bytes, split into its two bytes.
    const auto unpack_row = [&](int64_t b, int set, int r) {
      const Block& blk = w[r][b];
      const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(load128(blk.scales)));
      for (int h = 0; h < 2; ++h) {
        const __m512i ql = _mm512_loadu_si512(blk.ql + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(load256(blk.qh + 32 * h));
        // 0xea = (a & b) | c: the low or high nibbles, and the two bits from qh.
        const __m512i q[2] = {
            _mm512_ternarylogic_epi32(ql, low4, _mm512_and_si512(_mm512_sllv_epi16(qh, up), bits45), 0xea),
            _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), low4,
                                      _mm512_and_si512(_mm512_srlv_epi16(qh, down), bits45), 0xea)};
        for (int k = 0; k < 2; ++k) {
          const int c = 2 * h + k;
          const __m512i scale = _mm512_permutexvar_epi16(pick_scale[c], sc);
          const __m512i even = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_and_si512(q[k], low_bytes), offset), scale);
          const __m512i odd = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_srli_epi16(q[k], 8), offset), scale);
          // 0xd8 = c ? b : a, bitwise; c is the mask of the low bytes.
          uint8_t* dst = arows[set] + 2048 * c + 64 * r;
          _mm512_store_si512(dst, _mm512_ternarylogic_epi32(_mm512_slli_epi16(odd, 8), even, low_bytes, 0xd8));
          _mm512_store_si512(dst + 1024, _mm512_ternarylogic_epi32(odd, _mm512_srli_epi16(even, 8), low_bytes, 0xd8));
        }
      }
      dw[set][r] = _cvtsh_ss(blk.d);
    };
    // Chunk c of block b: zero C first, store it after the last chunk.
#define RIDGE_AMX_Q6_ROWS_ISSUE(TL, TH, TB)                                     \
  RIDGE_TILE_LOAD(TL, arows[set] + 2048 * c, 64, 1024);                         \
  RIDGE_TILE_LOAD(TH, arows[set] + 2048 * c + 1024, 64, 1024);                  \
  RIDGE_TILE_LOAD(TB, bt + b * kKRowsBlockBytes + 1024 * c, 64, 1024);          \
  _tile_dpbusd(6, TL, TB);                                                      \
  _tile_dpbssd(7, TH, TB)
    const auto issue = [&](int64_t b, int c, int set, int dset) {
      if (c == 0) {
        _tile_zero(6);
        _tile_zero(7);
      }
      if (c % 2 == 0) {
        RIDGE_AMX_Q6_ROWS_ISSUE(0, 1, 2);
      } else {
        RIDGE_AMX_Q6_ROWS_ISSUE(3, 4, 5);
      }
      if (c == 3) {
        RIDGE_TILE_STORE(6, dots[dset][0]);
        RIDGE_TILE_STORE(7, dots[dset][1]);
      }
    };
#undef RIDGE_AMX_Q6_ROWS_ISSUE
    RowsAhead prefetch_part(a, r0, nb);
    __m512 acc[kPanelRows];  // row r's 16 tokens
#pragma GCC unroll 16
    for (int r = 0; r < kPanelRows; ++r) acc[r] = _mm512_setzero_ps();
    // As for Q4_K: block b + 1 on the tiles, block b's dots combined, block b + 2
    // unpacked, interleaved row by row.
    const auto set_of = [](int64_t b) { return static_cast<int>(b % 3); };
    for (int r = 0; r < kPanelRows; ++r) unpack_row(0, 0, r);
    for (int r = 0; r < kPanelRows && nb > 1; ++r) unpack_row(1, 1, r);
    for (int c = 0; c < 4; ++c) issue(0, c, 0, 0);
    for (int64_t b = 0; b < nb; ++b) {
      const int set = set_of(b), dset = static_cast<int>(b % 2);
      const bool next = b + 1 < nb, ahead = b + 2 < nb;
      const __m512 dy = _mm512_loadu_ps(acts + b * kKActTile + 4096);  // a.amx_tiles need not be aligned
#pragma GCC unroll 16
      for (int r = 0; r < kPanelRows; ++r) {
        if (next && r % 4 == 0) issue(b + 1, r / 4, set_of(b + 1), 1 - dset);
        prefetch_part();  // part b * kPanelRows + r
        const __m512i isum = _mm512_add_epi32(_mm512_load_si512(dots[dset][0] + kAmxTokens * r),
                                              _mm512_slli_epi32(_mm512_load_si512(dots[dset][1] + kAmxTokens * r), 8));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(_mm512_set1_ps(dw[set][r]), dy), acc[r]);
        if (ahead) unpack_row(b + 2, set_of(b + 2), r);
      }
    }
    transpose16x16_ps(acc);  // now token t's 16 rows
#pragma GCC unroll 16
    for (int t = 0; t < kAmxTokens; ++t) store_rows16(a.y + t * a.ldy + r0, acc[t], rows);
  }
  if (n_tokens > kAmxTokens) gemm<Q6K>(tokens_from(a, kAmxTokens), n_rows, n_tokens - kAmxTokens);
}

// Q8_0, Q4_0 and Q5_0 at 16-31 tokens (one token tile), as Q4_K and Q6_K above: the
// weight rows are tile A, for Q8_0 straight from the GGUF blocks (one strided tile load of
// 16 rows' 32 bytes, nothing unpacked), for Q4_0/Q5_0 unpacked per 16 rows into signed
// bytes q - 2^kShift, in element order; the activations, transposed once per call, are
// tile B. A TDPBSSD per block, then its float scales through the reference's fma. (The
// panel form unpacks each block into 16-row vectors, shifted to unsigned and back, for
// one token tile's use.) Q4_1 and Q5_1 (kMin) keep q unsigned (TDPBUSD) and add the
// block's min as the panel form does, m x the tokens' block sums, the reference's second fma.
template <class U8>
void gemm_amx_q8_rows(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  constexpr bool kDirect = std::is_same_v<U8, U8Q8_0>;
  constexpr size_t kBytes = U8::kBytes;  // a block; its f16 scale first
  const int64_t nb = a.n_in / 32;
  configure_tiles({{16, 32}, {16, 32}, {8, 64}, {8, 64}, {16, 64}, {16, 64}});
  const uint8_t* acts = one_tile_acts(a, ActFormat::kQ8_0);
  const uint8_t* bt = rows_b(a, ActFormat::kQ8_0, acts);  // B of block b at 512 b
  alignas(64) int32_t dots[2][kAmxTokens * kPanelRows];
  alignas(64) float dw[2][kPanelRows];
  [[maybe_unused]] alignas(64) float dm[2][kPanelRows];  // kMin: the rows' f16 mins, after d
  for (int64_t r0 = 0; r0 < n_rows; r0 += kPanelRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, n_rows - r0));
    const uint8_t* w[kPanelRows];
    for (int r = 0; r < kPanelRows; ++r) w[r] = a.w + (r0 + std::min(r, rows - 1)) * a.w_stride;
    // Block b's A rows: for Q8_0 in the file (16 rows w_stride apart), except the last
    // rows of a matrix (fewer than 16, which a 16-row load would read past), copied out
    // with the last row repeated as the unpacked types' rows are, to copy + 512 b.
    const bool staged = !kDirect || rows < kPanelRows;
    uint8_t* copy = staged ? thread_buffer<3>(static_cast<size_t>(nb) * 512, "unpacked weight rows") : nullptr;
    const __m256i offset = _mm256_set1_epi8(static_cast<char>(1 << U8::kShift));
    const auto unpack_row = [&](int64_t b, int r) {  // U8Q8_0::load is q + 128: back to q as well
      const __m256i q = U8::load(w[r] + b * kBytes);
      _mm256_store_si256(reinterpret_cast<__m256i*>(copy + 512 * b + 32 * r), U8::kMin ? q : _mm256_sub_epi8(q, offset));
    };
    const auto issue = [&](int64_t b, int set) {
      // The 16 rows' f16 scales (and mins) gathered as the blocks' first 4 bytes, then
      // converted at once, not by 16 (32) scalar conversions per block (Gemm q4_1 x16: 7%
      // faster).
      static_assert(kBytes >= 4, "a block holds the 4 bytes read");
      alignas(64) uint32_t head[kPanelRows];
      for (int r = 0; r < kPanelRows; ++r) std::memcpy(&head[r], w[r] + b * kBytes, 4);
      const __m512i words = _mm512_load_si512(head);
      _mm512_store_ps(dw[set], _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words)));
      if constexpr (U8::kMin)
        _mm512_store_ps(dm[set], _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(words, 16))));
      // The file's weights are read-only: that A load names no memory; the copied rows'
      // load names them, so it follows the stores that wrote them.
#define RIDGE_AMX_Q8_ROWS_ISSUE(TA, TB, TC)                                                                       \
  if (staged) {                                                                                                   \
    RIDGE_TILE_LOAD(TA, copy + 512 * b, 32, 512);                                                                 \
  } else {                                                                                                        \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #TA                                                             \
                     :                                                                                            \
                     : "r"(a.w + r0 * a.w_stride + b * kBytes + offsetof(BlockQ8_0, qs)), "r"(static_cast<long>(a.w_stride))); \
  }                                                                                                               \
  RIDGE_TILE_LOAD(TB, bt + 512 * b, 64, 512);                                                                     \
  _tile_zero(TC);                                                                                                 \
  if constexpr (U8::kMin) _tile_dpbusd(TC, TA, TB);                                                               \
  else _tile_dpbssd(TC, TA, TB);                                                                                  \
  RIDGE_TILE_STORE(TC, dots[set])
      if (set == 0) {
        RIDGE_AMX_Q8_ROWS_ISSUE(0, 2, 4);
      } else {
        RIDGE_AMX_Q8_ROWS_ISSUE(1, 3, 5);
      }
#undef RIDGE_AMX_Q8_ROWS_ISSUE
    };
    RowsAhead prefetch_part(a, r0, nb);
    __m512 acc[kPanelRows];  // row r's 16 tokens
#pragma GCC unroll 16
    for (int r = 0; r < kPanelRows; ++r) acc[r] = _mm512_setzero_ps();
    // Staged rows are unpacked three blocks ahead, a row after each row's combining: not
    // all of them before the first tile product, and not so close to it that the tile
    // load of a block waits for the stores that unpacked it (two blocks ahead, the
    // x16 Q5_0 and Q4_1 kernels ran 10-15% slower; the K-quant kernels gained nothing).
    constexpr int64_t kAhead = 3;
    for (int64_t b = 0; b < std::min<int64_t>(kAhead, nb) && staged; ++b)
      for (int r = 0; r < kPanelRows; ++r) unpack_row(b, r);
    issue(0, 0);
    for (int64_t b = 0; b < nb; ++b) {
      const int set = static_cast<int>(b % 2);
      const bool ahead = staged && b + kAhead < nb;
      if (b + 1 < nb) issue(b + 1, 1 - set);
      const __m512 dy = _mm512_loadu_ps(acts + b * kQ8ActTile + kAmxTokens * 32);  // a.amx_tiles need not be aligned
      [[maybe_unused]] __m512 sums;  // kMin: the tokens' block sums
      if constexpr (U8::kMin) sums = _mm512_cvtepi32_ps(_mm512_loadu_si512(acts + b * kQ8ActTile + kAmxTokens * 32 + 64));
#pragma GCC unroll 16
      for (int r = 0; r < kPanelRows; ++r) {
        prefetch_part();  // part b * kPanelRows + r
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(dots[set] + kAmxTokens * r)),
                                 _mm512_mul_ps(_mm512_set1_ps(dw[set][r]), dy), acc[r]);
        if constexpr (U8::kMin) acc[r] = _mm512_fmadd_ps(sums, _mm512_mul_ps(_mm512_set1_ps(dm[set][r]), dy), acc[r]);
        if (ahead) unpack_row(b + kAhead, r);
      }
    }
    transpose16x16_ps(acc);  // now token t's 16 rows
#pragma GCC unroll 16
    for (int t = 0; t < kAmxTokens; ++t) store_rows16(a.y + t * a.ldy + r0, acc[t], rows);
  }
  if (n_tokens > kAmxTokens) gemm<Q8Family<U8>>(tokens_from(a, kAmxTokens), n_rows, n_tokens - kAmxTokens);
}

}  // namespace

void gemm_amx_rows_q8_0(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm_amx_q8_rows<U8Q8_0>(a, n_rows, n_tokens); }
void gemm_amx_rows_q4_0(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm_amx_q8_rows<U8Q4_0>(a, n_rows, n_tokens); }
void gemm_amx_rows_q5_0(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm_amx_q8_rows<U8Q5_0>(a, n_rows, n_tokens); }
void gemm_amx_rows_q4_1(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm_amx_q8_rows<U8Q4_1>(a, n_rows, n_tokens); }
void gemm_amx_rows_q5_1(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm_amx_q8_rows<U8Q5_1>(a, n_rows, n_tokens); }
void gemm_amx_rows_q4_k(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm_amx_k4_rows<false>(a, n_rows, n_tokens); }
void gemm_amx_rows_q5_k(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm_amx_k4_rows<true>(a, n_rows, n_tokens); }
void gemm_amx_rows_q6_k(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm_amx_q6_k_rows(a, n_rows, n_tokens); }

size_t amx_rows_b_bytes(ActFormat format, int64_t n_in) {
  if (format != ActFormat::kQ8_0 && format != ActFormat::kQ8_K)
    throw Error("amx_rows_b_bytes: the AMX kernels take Q8_0 or Q8_K activations");
  return rows_b_bytes(format, n_in);
}

void amx_build_rows_b(ActFormat format, const uint8_t* tiles, int64_t n_in, uint8_t* out) {
  if (format == ActFormat::kQ8_0) return build_q8_rows_b(tiles, n_in / 32, out);
  if (format == ActFormat::kQ8_K) return build_k_rows_b(tiles, n_in / kQK_K, out);
  throw Error("amx_build_rows_b: the AMX kernels take Q8_0 or Q8_K activations");
}

}  // namespace ridge::kernels
