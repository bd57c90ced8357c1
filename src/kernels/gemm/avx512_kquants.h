// The AVX-512 VNNI K-quant families (Q4_K, Q5_K, Q6_K against Q8_K activations), for
// avx512.cpp and the AMX kernels, on the drivers of avx512_panels.h (the design: the top
// of avx512.cpp). Internal to those files, after their target pragma; internal linkage,
// so each includer compiles and inlines them with its own kernels. (In a .cpp of their
// own, GCC inlined the decode tiles differently and Q4_K decode ran 10% slower: GemvL2
// 36.9 vs 33.4 GB/s.)
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "core/quant_blocks.h"
#include "kernels/gemm/avx512_panels.h"

namespace ridge::kernels {
namespace {

// ---- Q4_K / Q5_K against Q8_K activations --------------------------------------------

inline const BlockQ8_K* act_k(const GemmArgs& a, int64_t t) {
  return reinterpret_cast<const BlockQ8_K*>(a.act + t * a.act_stride);
}



// Panel K-quant sums for tokens t < T of block b: isum[t] += sum_g scale_g * dot_g over
// kGroups groups of 256 / kGroups elements, the weight vectors and int32 scale vectors
// of the groups stored in order from w and scales.
template <int T, int kGroups>
inline void add_scaled_group_dots(const uint8_t* w, const uint8_t* scales, const BlockQ8_K* const (&y)[T], int64_t b,
                                  __m512i (&isum)[T]) {
  constexpr int kDwords = kQK_K / kGroups / 4;
  for (int g = 0; g < kGroups; ++g) {
    __m512i dot[T];
    for (int t = 0; t < T; ++t) dot[t] = _mm512_setzero_si512();
    for (int k = 0; k < kDwords; ++k) {
      const __m512i wv = _mm512_load_si512(w + 64 * (kDwords * g + k));
      for (int t = 0; t < T; ++t)
        dot[t] = _mm512_dpbusd_epi32(dot[t], wv, bcast32(y[t][b].qs + 4 * (kDwords * g + k)));
    }
    const __m512i sc = _mm512_load_si512(scales + 64 * g);
    for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dot[t], sc));
  }
}

template <bool kFifthBit>
struct QK4 {
  using Block = std::conditional_t<kFifthBit, BlockQ5_K, BlockQ4_K>;
  static constexpr int kRowTile = kDecodeRows;
  static constexpr int64_t kPanelTokens = 4;
  template <int T>
  static void tile(const GemmArgs& a, int64_t r0, int rows, int64_t t0) { rows8<T>(a, r0, rows, t0); }

  // Row-major tile: the exact isum (sum_s scale_s * dot_s) per row and token from
  // maddubs + vpdpwssd lanes, imin (sum_s min_s * bsum32_s) from madd lanes, each
  // reduced across lanes with the rows in the result's lanes. One zmm covers 64
  // elements: the 32 qs bytes of sub-blocks 2j (low nibbles, low half) and 2j + 1 (high
  // nibbles, high half), against the 64 activation bytes as stored.
  template <int T>
  static void rows8(const GemmArgs& a, int64_t r0, int rows, int64_t t0) {
    const int64_t nb = a.n_in / kQK_K;
    const Block* w[kDecodeRows];
    const uint8_t* wb[kDecodeRows];
    for (int r = 0; r < kDecodeRows; ++r) {
      wb[r] = a.w + (r0 + std::min(r, rows - 1)) * a.w_stride;
      w[r] = reinterpret_cast<const Block*>(wb[r]);
    }
    const BlockQ8_K* y[T];
    for (int t = 0; t < T; ++t) y[t] = act_k(a, t0 + t);
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    // Shift 0 for the low half (low nibbles), 4 for the high half.
    const __m512i nibble_shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    // pshufb patterns on the broadcast scales_mins_k4 bytes: words of scale 2j (low
    // half) and 2j + 1 (high half); the 16 bsums' mins (min k / 2 for bsum k).
    __m512i pick_scale[4];
    for (int j = 0; j < 4; ++j)
      pick_scale[j] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(static_cast<short>(0x8000 | (2 * j)))),
                                         _mm256_set1_epi16(static_cast<short>(0x8000 | (2 * j + 1))), 1);
    const __m256i pick_mins = _mm256_setr_epi8(8, -128, 8, -128, 9, -128, 9, -128, 10, -128, 10, -128, 11, -128, 11, -128,
                                               12, -128, 12, -128, 13, -128, 13, -128, 14, -128, 14, -128, 15, -128, 15, -128);
    const bool into_l1 = next_tile_into_l1(a);
    for (int64_t b = 0; b < nb; ++b) {
      prefetch_next_tile(a, r0, b, sizeof(Block), into_l1);
      __m256i isum[T][8], imin[T][8];
      for (int r = 0; r < kDecodeRows; ++r) {
        const Block& blk = w[r][b];
        const __m128i sm = scales_mins_k4_vec(blk.scales);
        const __m512i sm4 = _mm512_broadcast_i32x4(sm);
        const __m256i mins = _mm256_shuffle_epi8(_mm512_castsi512_si256(sm4), pick_mins);
        [[maybe_unused]] __m512i qh;
        if constexpr (kFifthBit) qh = _mm512_broadcast_i64x4(load256(blk.qh));
        __m512i q[4], sc[4];
        for (int j = 0; j < 4; ++j) {
          q[j] = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(load256(blk.qs + 32 * j)), nibble_shift), low4);
          if constexpr (kFifthBit) {
            const __m512i bit = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8(static_cast<char>(1 << (2 * j)))),
                                                   _mm256_set1_epi8(static_cast<char>(1 << (2 * j + 1))), 1);
            q[j] = _mm512_mask_add_epi8(q[j], _mm512_test_epi8_mask(qh, bit), q[j], _mm512_set1_epi8(16));
          }
          sc[j] = _mm512_shuffle_epi8(sm4, pick_scale[j]);
        }
        for (int t = 0; t < T; ++t) {
          __m512i sumi = _mm512_setzero_si512();
          for (int j = 0; j < 4; ++j)
            sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(q[j], _mm512_loadu_si512(y[t][b].qs + 64 * j)), sc[j]);
          isum[t][r] = _mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1));
          imin[t][r] = _mm256_madd_epi16(load256(y[t][b].bsums), mins);
        }
      }
      const __m256 dv = f16_rows8(wb, b * sizeof(Block) + offsetof(Block, d));
      const __m256 dminv = f16_rows8(wb, b * sizeof(Block) + offsetof(Block, dmin));
      for (int t = 0; t < T; ++t) {
        const __m256 dy = _mm256_set1_ps(y[t][b].d);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum_lanes8(isum[t])), _mm256_mul_ps(dv, dy), acc[t]);
        acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(sum_lanes8(imin[t])), _mm256_mul_ps(dminv, dy), acc[t]);
      }
    }
    for (int t = 0; t < T; ++t) store_rows8(a.y + (t0 + t) * a.ldy + r0, acc[t], rows);
  }

  // Panel block: 64 vectors of 16 rows x 4 bytes (sub s, dword g at 8s + g), 8 scale
  // vectors (int32), 8 min vectors (int16 min twice per int32 lane), d and dmin floats.
  static constexpr size_t kW = 64 * 64, kScales = kW, kMins = kScales + 8 * 64, kD = kMins + 8 * 64,
                          kDmin = kD + 64, kPanelBlock = kDmin + 64;

  // Transposes the packed nibbles first (one transpose per 64 elements) and unpacks
  // 16 rows at a time; the scales and mins are unpacked 16 rows at a time too, from one
  // transpose of the block's head.
  static constexpr size_t kBlockBytes = sizeof(Block), kBlockElements = kQK_K;
  using Act = const BlockQ8_K*;
  static Act act(const GemmArgs& a, int64_t t) { return act_k(a, t); }

  static void pack_block(const uint8_t* const (&w)[kPanelRows], int64_t b, uint8_t* dst) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const size_t base = b * sizeof(Block);
    [[maybe_unused]] __m512i qh[8];
    if constexpr (kFifthBit) load_transposed(w, base + offsetof(Block, qh), qh);
    for (int j = 0; j < 4; ++j) {  // 32 bytes: sub-block 2j in the low nibbles, 2j + 1 high
      __m512i q[8];
      load_transposed(w, base + offsetof(Block, qs) + 32 * j, q);
      for (int g = 0; g < 8; ++g) {
        __m512i lo = _mm512_and_si512(q[g], low4);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q[g], 4), low4);
        if constexpr (kFifthBit) {
          const __m512i sixteen = _mm512_set1_epi8(16);
          const __mmask64 lo_bit = _mm512_test_epi8_mask(qh[g], _mm512_set1_epi8(static_cast<char>(1 << (2 * j))));
          const __mmask64 hi_bit = _mm512_test_epi8_mask(qh[g], _mm512_set1_epi8(static_cast<char>(1 << (2 * j + 1))));
          lo = _mm512_mask_add_epi8(lo, lo_bit, lo, sixteen);
          hi = _mm512_mask_add_epi8(hi, hi_bit, hi, sixteen);
        }
        _mm512_store_si512(dst + 64 * (8 * (2 * j) + g), lo);
        _mm512_store_si512(dst + 64 * (8 * (2 * j + 1) + g), hi);
      }
    }
    // The block's first 32 bytes, transposed: dword 0 is d | dmin << 16, dwords 1..3
    // the packed scales and mins (scales_mins_k4's u[0..2]), for 16 rows per vector.
    __m512i head[8];
    load_transposed(w, base, head);
    const __m512i m3f = _mm512_set1_epi32(0x3f3f3f3f), m0f = _mm512_set1_epi32(0x0f0f0f0f),
                  m30 = _mm512_set1_epi32(0x30303030);
    const __m512i sm[4] = {  // bytes: scales 0..3, scales 4..7, mins 0..3, mins 4..7
        _mm512_and_si512(head[1], m3f),
        _mm512_or_si512(_mm512_and_si512(head[3], m0f), _mm512_and_si512(_mm512_srli_epi32(head[1], 2), m30)),
        _mm512_and_si512(head[2], m3f),
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(head[3], 4), m0f),
                        _mm512_and_si512(_mm512_srli_epi32(head[2], 2), m30))};
    const __m512i byte = _mm512_set1_epi32(0xff);
    for (int s = 0; s < 8; ++s) {
      const int shift = 8 * (s % 4);
      _mm512_store_si512(dst + kScales + 64 * s, _mm512_and_si512(_mm512_srli_epi32(sm[s / 4], shift), byte));
      const __m512i m = _mm512_and_si512(_mm512_srli_epi32(sm[2 + s / 4], shift), byte);
      _mm512_store_si512(dst + kMins + 64 * s, _mm512_or_si512(m, _mm512_slli_epi32(m, 16)));
    }
    _mm512_store_ps(dst + kD, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head[0])));
    _mm512_store_ps(dst + kDmin, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head[0], 16))));
  }

  template <int T>
  static void block_dots(const uint8_t* blk, const Act (&y)[T], int64_t b, __m512 (&acc)[T]) {
    __m512i isum[T], imin[T];
    for (int t = 0; t < T; ++t) isum[t] = imin[t] = _mm512_setzero_si512();
    add_scaled_group_dots<T, 8>(blk, blk + kScales, y, b, isum);
    for (int s = 0; s < 8; ++s) {
      const __m512i mn = _mm512_load_si512(blk + kMins + 64 * s);
      for (int t = 0; t < T; ++t) imin[t] = _mm512_dpwssd_epi32(imin[t], mn, bcast32(y[t][b].bsums + 2 * s));
    }
    const __m512 dv = _mm512_load_ps(blk + kD), dminv = _mm512_load_ps(blk + kDmin);
    for (int t = 0; t < T; ++t) {
      const __m512 dy = _mm512_set1_ps(y[t][b].d);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dv, dy), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin[t]), _mm512_mul_ps(dminv, dy), acc[t]);
    }
  }
};

// ---- Q6_K against Q8_K activations ---------------------------------------------------

struct Q6K {
  static constexpr int kRowTile = kDecodeRows;
  static constexpr int64_t kPanelTokens = 4;
  template <int T>
  static void tile(const GemmArgs& a, int64_t r0, int rows, int64_t t0) { rows8<T>(a, r0, rows, t0); }
  // The 32 bytes q (0..63) of chunk c (elements 32c..32c+31).
  static __m256i chunk(const BlockQ6_K& blk, int c) {
    const int h = c / 4, k = c % 4;
    const __m256i src = load256(blk.ql + 64 * h + 32 * (k % 2));
    const __m256i low = _mm256_and_si256(k < 2 ? src : _mm256_srli_epi16(src, 4), _mm256_set1_epi8(0x0f));
    const __m256i qh = load256(blk.qh + 32 * h);
    const __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), _mm256_set1_epi8(3)), 4);
    return _mm256_or_si256(low, high);
  }

  // isum = sum_g scale_g * dot_g - 32 * sum_g scale_g * bsum_g, rows in lanes. One zmm
  // covers 64 elements: half h's ql bytes 64h..64h+63 give elements 128h..128h+63 (low
  // nibbles) and 128h+64..128h+127 (high nibbles); the qh bytes 32h..32h+31, in both
  // halves, give bit pairs 0/1 (low half) and 2/3 (high half), shifted per 16-bit lane
  // to bits 4..5 of each byte.
  template <int T>
  static void rows8(const GemmArgs& a, int64_t r0, int rows, int64_t t0) {
    const int64_t nb = a.n_in / kQK_K;
    const BlockQ6_K* w[kDecodeRows];
    const uint8_t* wb[kDecodeRows];
    for (int r = 0; r < kDecodeRows; ++r) {
      wb[r] = a.w + (r0 + std::min(r, rows - 1)) * a.w_stride;
      w[r] = reinterpret_cast<const BlockQ6_K*>(wb[r]);
    }
    const BlockQ8_K* y[T];
    for (int t = 0; t < T; ++t) y[t] = act_k(a, t0 + t);
    const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
    const auto halves = [](short lo, short hi) {
      return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(lo)), _mm256_set1_epi16(hi), 1);
    };
    // Bit pairs 0/1 to bits 4..5 (left 4, left 2); pairs 2/3 (none, right 2).
    const __m512i left = halves(4, 2), right = halves(0, 2);
    // Word lane i of the maddubs result covers elements 2i, 2i + 1: group 4c + i / 8.
    __m512i pick_scale[4];
    for (int c = 0; c < 4; ++c) {
      alignas(64) int16_t idx[32];
      for (int i = 0; i < 32; ++i) idx[i] = static_cast<int16_t>(4 * c + i / 8);
      pick_scale[c] = _mm512_load_si512(idx);
    }
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    const bool into_l1 = next_tile_into_l1(a);
    for (int64_t b = 0; b < nb; ++b) {
      prefetch_next_tile(a, r0, b, sizeof(BlockQ6_K), into_l1);
      __m256i isum[T][8];
      for (int r = 0; r < kDecodeRows; ++r) {
        const BlockQ6_K& blk = w[r][b];
        const __m256i scales = _mm256_cvtepi8_epi16(load128(blk.scales));
        const __m512i scales2 = _mm512_castsi256_si512(scales);
        __m512i q[4], sc[4];
        for (int h = 0; h < 2; ++h) {  // ternary logic 0xea: (a & b) | c
          const __m512i ql = _mm512_loadu_si512(blk.ql + 64 * h);
          const __m512i qh = _mm512_broadcast_i64x4(load256(blk.qh + 32 * h));
          q[2 * h] = _mm512_ternarylogic_epi32(ql, low4, _mm512_and_si512(_mm512_sllv_epi16(qh, left), bits45), 0xea);
          q[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), low4,
                                                   _mm512_and_si512(_mm512_srlv_epi16(qh, right), bits45), 0xea);
        }
        for (int c = 0; c < 4; ++c) sc[c] = _mm512_permutexvar_epi16(pick_scale[c], scales2);
        for (int t = 0; t < T; ++t) {
          __m512i sumi = _mm512_setzero_si512();
          for (int c = 0; c < 4; ++c)
            sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(q[c], _mm512_loadu_si512(y[t][b].qs + 64 * c)), sc[c]);
          const __m256i dots = _mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1));
          isum[t][r] = _mm256_sub_epi32(dots, _mm256_slli_epi32(_mm256_madd_epi16(load256(y[t][b].bsums), scales), 5));
        }
      }
      const __m256 dv = f16_rows8(wb, b * sizeof(BlockQ6_K) + offsetof(BlockQ6_K, d));
      for (int t = 0; t < T; ++t)
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum_lanes8(isum[t])), _mm256_mul_ps(dv, _mm256_set1_ps(y[t][b].d)),
                                 acc[t]);
    }
    for (int t = 0; t < T; ++t) store_rows8(a.y + (t0 + t) * a.ldy + r0, acc[t], rows);
  }

  // Panel block: 64 vectors (group g = 16 elements = 4 dwords at 4g..4g+3), 16 scale
  // vectors (int32), 8 scale-pair vectors (int16 scales 2i, 2i+1 per int32 lane), d.
  static constexpr size_t kW = 64 * 64, kScales = kW, kPairs = kScales + 16 * 64, kD = kPairs + 8 * 64,
                          kPanelBlock = kD + 64;

  // Transposes ql and qh as stored (6 transposes per block) and assembles q from the
  // transposed bytes, 16 rows at a time; the scales go through one 16 x 16 byte transpose.
  static constexpr size_t kBlockBytes = sizeof(BlockQ6_K), kBlockElements = kQK_K;
  using Act = const BlockQ8_K*;
  static Act act(const GemmArgs& a, int64_t t) { return act_k(a, t); }

  static void pack_block(const uint8_t* const (&w)[kPanelRows], int64_t b, uint8_t* dst) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), low2 = _mm512_set1_epi8(0x03);
    const size_t base = b * sizeof(BlockQ6_K);
    for (int h = 0; h < 2; ++h) {  // elements 128h .. 128h + 127: chunks 4h .. 4h + 3
      __m512i ql0[8], ql1[8], qh[8];
      load_transposed(w, base + offsetof(BlockQ6_K, ql) + 64 * h, ql0);
      load_transposed(w, base + offsetof(BlockQ6_K, ql) + 64 * h + 32, ql1);
      load_transposed(w, base + offsetof(BlockQ6_K, qh) + 32 * h, qh);
      for (int k = 0; k < 4; ++k) {
        for (int g = 0; g < 8; ++g) {
          const __m512i src = k % 2 ? ql1[g] : ql0[g];
          const __m512i low = _mm512_and_si512(k < 2 ? src : _mm512_srli_epi16(src, 4), low4);
          const __m512i high = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh[g], 2 * k), low2), 4);
          _mm512_store_si512(dst + 64 * (8 * (4 * h + k) + g), _mm512_or_si512(low, high));
        }
      }
    }
    __m128i sc[16];  // per row: the 16 int8 scales; transposed: one vector per group
    for (int r = 0; r < kPanelRows; ++r) sc[r] = load128(w[r] + base + offsetof(BlockQ6_K, scales));
    transpose16x16_bytes(sc);
    for (int g = 0; g < 16; ++g) _mm512_store_si512(dst + kScales + 64 * g, _mm512_cvtepi8_epi32(sc[g]));
    for (int i = 0; i < 8; ++i) {
      const __m512i lo = _mm512_and_si512(_mm512_cvtepi8_epi32(sc[2 * i]), _mm512_set1_epi32(0xffff));
      const __m512i hi = _mm512_slli_epi32(_mm512_cvtepi8_epi32(sc[2 * i + 1]), 16);
      _mm512_store_si512(dst + kPairs + 64 * i, _mm512_or_si512(lo, hi));
    }
    for (int h = 0; h < 2; ++h)
      _mm256_store_ps(reinterpret_cast<float*>(dst + kD + 32 * h),
                      f16_rows8(w + 8 * h, base + offsetof(BlockQ6_K, d)));
  }

  template <int T>
  static void block_dots(const uint8_t* blk, const Act (&y)[T], int64_t b, __m512 (&acc)[T]) {
    __m512i isum[T], off[T];
    for (int t = 0; t < T; ++t) isum[t] = off[t] = _mm512_setzero_si512();
    add_scaled_group_dots<T, 16>(blk, blk + kScales, y, b, isum);
    for (int i = 0; i < 8; ++i) {
      const __m512i pr = _mm512_load_si512(blk + kPairs + 64 * i);
      for (int t = 0; t < T; ++t) off[t] = _mm512_dpwssd_epi32(off[t], pr, bcast32(y[t][b].bsums + 2 * i));
    }
    const __m512 dv = _mm512_load_ps(blk + kD);
    for (int t = 0; t < T; ++t) {
      const __m512i s = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(off[t], 5));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dv, _mm512_set1_ps(y[t][b].d)), acc[t]);
    }
  }
};

}  // namespace
}  // namespace ridge::kernels
