// Part of gemm_avx512.cpp, not a header of its own: the AMX-INT8 kernels (declared in
// gemm_amx.h), included once inside that file's anonymous namespace after the AVX-512
// families, whose panel packing they reuse. Design:
//
// The AVX-512 panels already hold 16 weight rows in the layout a tile's second operand
// wants: one 64-byte vector per 4 consecutive elements, lane r for row r. A tile B of
// 16 such vectors is 64 elements of 16 rows; tile A is 16 tokens' activation bytes
// loaded straight from the quantized rows (row stride = the activation stride); C gets
// the 16 x 16 integer dots. So:
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
#pragma once

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bitalg,avx512vbmi,amx-tile,amx-int8")

// The 64-byte tile configuration of palette 1: tile i is rows[i] x colsb[i] bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

inline void configure_tiles(std::initializer_list<std::pair<int, int>> shapes) {
  TileConfig config;
  int i = 0;
  for (const auto& [rows, colsb] : shapes) {
    config.rows[i] = static_cast<uint8_t>(rows);
    config.colsb[i] = static_cast<uint16_t>(colsb);
    ++i;
  }
  // Not _tile_loadconfig: GCC 12 does not count its builtin as reading the struct and
  // drops the stores that fill it. The asm's memory operand is the whole struct.
  __asm__ volatile("ldtilecfg %0" : : "m"(config));
}

constexpr int kAmxTokens = 16;  // tokens per A tile (its rows)

// Tokens t0.. of `a` as a call of their own: the batch remainder the tiles leave.
inline GemmArgs tokens_from(const GemmArgs& a, int64_t t0) {
  GemmArgs rest = a;
  rest.act = a.act + t0 * a.act_stride;
  rest.y = a.y + t0 * a.ldy;
  rest.scales_t = nullptr;  // the AVX-512 kernels do not read the transposed tables
  rest.sums_t = nullptr;
  return rest;
}

// ---- Q8_0, Q4_0, Q5_0 -----------------------------------------------------------------

// The batch's activations laid out for the tiles, once per call: for each 16-token tile
// and block, the A tile's bytes (16 rows, contiguous: loads stream instead of touching
// 16 scattered rows), the 16 tokens' scales, and any per-token integers the family
// needs. Per-thread, grown like the panel.
uint8_t* act_tile_buffer(size_t bytes) {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<uint8_t, Free> buffer;
  thread_local size_t capacity = 0;
  if (bytes > capacity) {
    const size_t rounded = (bytes + 4095) / 4096 * 4096;
    buffer.reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
    if (!buffer) throw Error(str_cat("gemm: cannot allocate ", rounded, " bytes of activation tiles"));
    capacity = rounded;
  }
  return buffer.get();
}

// Runs the output tile of 16 rows x (16 * kTiles) tokens over all blocks: per block,
// issue(b) runs the tiles and stores their dots, combine(tile, b, acc) applies the
// scales to one token tile's accumulators. The accumulators live in L1 (32 tokens'
// would not fit in registers beside the rest).
template <int kTiles, class Issue, class Combine>
inline void run_output_tile(const GemmArgs& a, int64_t nb, int64_t r0, int rows, int64_t t0, Issue&& issue,
                            Combine&& combine) {
  alignas(64) float acc[kTiles][kAmxTokens][kPanelRows] = {};
  for (int64_t b = 0; b < nb; ++b) {
    issue(b);
    for (int tile = 0; tile < kTiles; ++tile) combine(tile, b, acc[tile]);
  }
  for (int tile = 0; tile < kTiles; ++tile)
    for (int t = 0; t < kAmxTokens; ++t)
      store_rows16(a.y + (t0 + kAmxTokens * tile + t) * a.ldy + r0, _mm512_load_ps(acc[tile][t]), rows);
}

// ---- Q8_0, Q4_0, Q5_0 -----------------------------------------------------------------

// Activation tile of a 32-element block: 16 tokens x 32 bytes, then their 16 scales.
constexpr size_t kQ8ActTile = kAmxTokens * 32 + 64;

// Tiles: 0 and 1 = A (two token tiles x one block), 2 = B (the block's 8 panel
// vectors), 4 and 5 = C (16 tokens x 16 rows of int32 each).
template <class U8>
void gemm_amx_q8(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  using K = Q8Family<U8>;
  const int64_t n_tiles = n_tokens / kAmxTokens, tiled = n_tiles * kAmxTokens;
  if (tiled < kAmxMinTokens) return gemm<K>(a, n_rows, n_tokens);
  configure_tiles({{kAmxTokens, 32}, {kAmxTokens, 32}, {8, 64}, {0, 0}, {kAmxTokens, 64}, {kAmxTokens, 64}});
  const int64_t nb = a.n_in / 32;
  uint8_t* acts = act_tile_buffer(static_cast<size_t>(n_tiles * nb) * kQ8ActTile);
  for (int64_t tile = 0; tile < n_tiles; ++tile)
    for (int t = 0; t < kAmxTokens; ++t) {
      const ActRow row = act_row(a, kAmxTokens * tile + t);
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* dst = acts + (tile * nb + b) * kQ8ActTile;
        std::memcpy(dst + 32 * t, row.q + 32 * b, 32);
        reinterpret_cast<float*>(dst + kAmxTokens * 32)[t] = row.d[b];
      }
    }
  uint8_t* panel = panel_buffer(static_cast<size_t>(nb) * K::kPanelBlock);
  alignas(64) int32_t dots[2][kAmxTokens * kPanelRows];
  // The panel holds q + 2^kShift (unsigned, for vpdpbusd); the tiles take q itself.
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(1 << U8::kShift));
  for (int64_t r0 = 0; r0 < n_rows; r0 += kPanelRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, n_rows - r0));
    pack_panel<K>(a, r0, rows, panel);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = panel + b * K::kPanelBlock;
      for (int g = 0; g < 8; ++g)
        _mm512_store_si512(blk + 64 * g, _mm512_sub_epi8(_mm512_load_si512(blk + 64 * g), offset));
    }
    const auto combine_from = [&](int64_t tile0) {
      return [&, tile0](int tile, int64_t b, float (*acc)[kPanelRows]) {
        const float* d = reinterpret_cast<const float*>(acts + ((tile0 + tile) * nb + b) * kQ8ActTile + kAmxTokens * 32);
        const __m512 dw = _mm512_load_ps(panel + b * K::kPanelBlock + 8 * 64);
        for (int t = 0; t < kAmxTokens; ++t)
          _mm512_store_ps(acc[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(dots[tile] + kPanelRows * t)),
                                                  _mm512_mul_ps(dw, _mm512_set1_ps(d[t])), _mm512_load_ps(acc[t])));
      };
    };
    // The intrinsics paste tile numbers into the asm text: literals only.
    int64_t tile = 0;
    for (; tile + 2 <= n_tiles; tile += 2)
      run_output_tile<2>(a, nb, r0, rows, kAmxTokens * tile, [&](int64_t b) {
        const uint8_t* act = acts + (tile * nb + b) * kQ8ActTile;
        _tile_loadd(0, act, 32);
        _tile_loadd(1, act + nb * kQ8ActTile, 32);
        _tile_loadd(2, panel + b * K::kPanelBlock, 64);
        _tile_zero(4);
        _tile_zero(5);
        _tile_dpbssd(4, 0, 2);
        _tile_dpbssd(5, 1, 2);
        _tile_stored(4, dots[0], 64);
        _tile_stored(5, dots[1], 64);
      }, combine_from(tile));
    if (tile < n_tiles)
      run_output_tile<1>(a, nb, r0, rows, kAmxTokens * tile, [&](int64_t b) {
        _tile_loadd(0, acts + (tile * nb + b) * kQ8ActTile, 32);
        _tile_loadd(2, panel + b * K::kPanelBlock, 64);
        _tile_zero(4);
        _tile_dpbssd(4, 0, 2);
        _tile_stored(4, dots[0], 64);
      }, combine_from(tile));
  }
  if (tiled < n_tokens) gemm<K>(tokens_from(a, tiled), n_rows, n_tokens - tiled);
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
  // row and split into bytes.
  static void pack(const uint8_t* const (&w)[kPanelRows], int64_t b, uint8_t* scratch, uint8_t* dst) {
    K::pack_block(w, b, scratch);
    alignas(64) int16_t pick[2][32];  // word i of a half: the scale of its row (i / 4, + 8)
    alignas(64) uint8_t even[64], odd[64];
    for (int i = 0; i < 32; ++i) {
      pick[0][i] = static_cast<int16_t>(2 * (i / 4));
      pick[1][i] = static_cast<int16_t>(2 * (8 + i / 4));
    }
    for (int i = 0; i < 64; ++i) {
      even[i] = static_cast<uint8_t>(2 * i);
      odd[i] = static_cast<uint8_t>(2 * i + 1);
    }
    const __m512i pick_lo = _mm512_load_si512(pick[0]), pick_hi = _mm512_load_si512(pick[1]);
    const __m512i low_bytes = _mm512_load_si512(even), high_bytes = _mm512_load_si512(odd);
    constexpr int kVectors = 64 / kGroups;
    for (int g = 0; g < kGroups; ++g) {
      const __m512i scale = _mm512_load_si512(scratch + K::kScales + 64 * g);  // int32 lanes, int16 values
      const __m512i s0 = _mm512_permutexvar_epi16(pick_lo, scale), s1 = _mm512_permutexvar_epi16(pick_hi, scale);
      for (int v = kVectors * g; v < kVectors * (g + 1); ++v) {
        const __m512i q = _mm512_load_si512(scratch + 64 * v);
        __m512i q0 = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(q));
        __m512i q1 = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(q, 1));
        if constexpr (kSignedOffset) {
          q0 = _mm512_sub_epi16(q0, _mm512_set1_epi16(32));
          q1 = _mm512_sub_epi16(q1, _mm512_set1_epi16(32));
        }
        const __m512i p0 = _mm512_mullo_epi16(q0, s0), p1 = _mm512_mullo_epi16(q1, s1);
        _mm512_store_si512(dst + kLo + 64 * v, _mm512_permutex2var_epi8(p0, low_bytes, p1));
        _mm512_store_si512(dst + kHi + 64 * v, _mm512_permutex2var_epi8(p0, high_bytes, p1));
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

// Activation tile of a 256-element block: 4 A tiles (16 tokens x 64 bytes each), the
// 16 tokens' scales, and for Q4_K/Q5_K their 16-sums added per sub-block and paired as
// the mins are (4 vectors, lane t: sums of sub-blocks 2i and 2i + 1 as int16).
constexpr size_t kKActTile = 4 * 1024 + 64 + 4 * 64;

// Tiles: 0 and 1 = A (two token tiles x 64 elements), 2 and 3 = B (low and high bytes
// of 64 elements), 4..7 = C (low and high dots over the whole block, per token tile).
template <class K>
void gemm_amx_k(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  using P = AmxKBlock<K>;
  const int64_t n_tiles = n_tokens / kAmxTokens, tiled = n_tiles * kAmxTokens;
  if (tiled < kAmxMinTokens) return gemm<K>(a, n_rows, n_tokens);
  configure_tiles({{kAmxTokens, 64}, {kAmxTokens, 64}, {16, 64}, {16, 64}, {kAmxTokens, 64}, {kAmxTokens, 64},
                   {kAmxTokens, 64}, {kAmxTokens, 64}});
  const int64_t nb = a.n_in / kQK_K;
  uint8_t* acts = act_tile_buffer(static_cast<size_t>(n_tiles * nb) * kKActTile);
  for (int64_t tile = 0; tile < n_tiles; ++tile)
    for (int t = 0; t < kAmxTokens; ++t) {
      const BlockQ8_K* y = act_k(a, kAmxTokens * tile + t);
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* dst = acts + (tile * nb + b) * kKActTile;
        for (int c = 0; c < 4; ++c) std::memcpy(dst + 1024 * c + 64 * t, y[b].qs + 64 * c, 64);
        reinterpret_cast<float*>(dst + 4096)[t] = y[b].d;
        auto* sums = reinterpret_cast<int16_t*>(dst + 4096 + 64);
        for (int s = 0; s < 8; ++s)
          sums[32 * (s / 2) + 2 * t + s % 2] = static_cast<int16_t>(y[b].bsums[2 * s] + y[b].bsums[2 * s + 1]);
      }
    }
  uint8_t* panel = panel_buffer(static_cast<size_t>(nb) * P::kBytes);
  alignas(64) uint8_t scratch[K::kPanelBlock];
  alignas(64) int32_t lo[2][kAmxTokens * kPanelRows], hi[2][kAmxTokens * kPanelRows];
  for (int64_t r0 = 0; r0 < n_rows; r0 += kPanelRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, n_rows - r0));
    const uint8_t* w[kPanelRows];
    for (int r = 0; r < kPanelRows; ++r) w[r] = a.w + (r0 + std::min(r, rows - 1)) * a.w_stride;
    for (int64_t b = 0; b < nb; ++b) {
      prefetch_ahead<kPanelRows>(a, r0, b, K::kBlockBytes);
      P::pack(w, b, scratch, panel + b * P::kBytes);
    }
    const auto combine_from = [&](int64_t tile0) {
      return [&, tile0](int tile, int64_t b, float (*acc)[kPanelRows]) {
        const uint8_t* blk = panel + b * P::kBytes;
        const uint8_t* act = acts + ((tile0 + tile) * nb + b) * kKActTile;
        const auto* dy = reinterpret_cast<const float*>(act + 4096);
        const auto* sums = reinterpret_cast<const int32_t*>(act + 4096 + 64);
        const __m512 dv = _mm512_load_ps(blk + P::kD);
        for (int t = 0; t < kAmxTokens; ++t) {
          const __m512i isum = _mm512_add_epi32(_mm512_load_si512(lo[tile] + kPanelRows * t),
                                                _mm512_slli_epi32(_mm512_load_si512(hi[tile] + kPanelRows * t), 8));
          const __m512 d = _mm512_set1_ps(dy[t]);
          __m512 sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dv, d), _mm512_load_ps(acc[t]));
          if constexpr (!P::kSignedOffset) {
            __m512i imin = _mm512_setzero_si512();
            for (int i = 0; i < 4; ++i)
              imin = _mm512_dpwssd_epi32(imin, _mm512_load_si512(blk + P::kMins + 64 * i),
                                         _mm512_set1_epi32(sums[kAmxTokens * i + t]));
            sum = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(_mm512_load_ps(blk + P::kDmin), d), sum);
          }
          _mm512_store_ps(acc[t], sum);
        }
      };
    };
    // The intrinsics paste tile numbers into the asm text: literals only. Low bytes are
    // unsigned; high bytes are signed for Q6_K, unsigned (0..7) otherwise.
#define RIDGE_AMX_K_DOTS(C, A, B)                      \
  if constexpr (P::kSignedOffset && B == 3) _tile_dpbssd(C, A, B); \
  else _tile_dpbsud(C, A, B)
    int64_t tile = 0;
    for (; tile + 2 <= n_tiles; tile += 2)
      run_output_tile<2>(a, nb, r0, rows, kAmxTokens * tile, [&](int64_t b) {
        const uint8_t* blk = panel + b * P::kBytes;
        const uint8_t* act = acts + (tile * nb + b) * kKActTile;
        _tile_zero(4);
        _tile_zero(5);
        _tile_zero(6);
        _tile_zero(7);
        for (int c = 0; c < 4; ++c) {
          _tile_loadd(0, act + 1024 * c, 64);
          _tile_loadd(1, act + nb * kKActTile + 1024 * c, 64);
          _tile_loadd(2, blk + P::kLo + 1024 * c, 64);
          _tile_loadd(3, blk + P::kHi + 1024 * c, 64);
          RIDGE_AMX_K_DOTS(4, 0, 2);
          RIDGE_AMX_K_DOTS(5, 0, 3);
          RIDGE_AMX_K_DOTS(6, 1, 2);
          RIDGE_AMX_K_DOTS(7, 1, 3);
        }
        _tile_stored(4, lo[0], 64);
        _tile_stored(5, hi[0], 64);
        _tile_stored(6, lo[1], 64);
        _tile_stored(7, hi[1], 64);
      }, combine_from(tile));
    if (tile < n_tiles)
      run_output_tile<1>(a, nb, r0, rows, kAmxTokens * tile, [&](int64_t b) {
        const uint8_t* blk = panel + b * P::kBytes;
        const uint8_t* act = acts + (tile * nb + b) * kKActTile;
        _tile_zero(4);
        _tile_zero(5);
        for (int c = 0; c < 4; ++c) {
          _tile_loadd(0, act + 1024 * c, 64);
          _tile_loadd(2, blk + P::kLo + 1024 * c, 64);
          _tile_loadd(3, blk + P::kHi + 1024 * c, 64);
          RIDGE_AMX_K_DOTS(4, 0, 2);
          RIDGE_AMX_K_DOTS(5, 0, 3);
        }
        _tile_stored(4, lo[0], 64);
        _tile_stored(5, hi[0], 64);
      }, combine_from(tile));
#undef RIDGE_AMX_K_DOTS
  }
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

#pragma GCC pop_options
