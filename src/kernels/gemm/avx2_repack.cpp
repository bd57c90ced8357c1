// AVX2 GEMM over Q4_K_R16 (gemm/repack.h), for CPUs without AVX-512: each 64-byte
// vector of a group is two ymm halves (rows 0-7, rows 8-15), each run as its own pass
// over the group's blocks (the second reads them again from L1 or L2). The avx2 table
// does not repack Q4_K yet: on Zen 4 under RIDGE_ISA=avx2 this ran GemvL2 1.9x the
// row-major kernel but streamed no faster from memory (no software prefetch, two
// passes); an AVX2-only machine has to decide it.
// Without vpdpbusd, the nibbles go through vpmaddubsw: eight of its int16 pair sums
// (|each| <= 2 * 15 * 128) add up within int16 over a 32-element sub-block, and one
// vpmaddwd against the scale in both halves of each lane gives scale * dot in int32.
// The same exact integer sums and float fmas as vec_dot_q4_k_scalar (avx512_repack.cpp).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/quant_blocks.h"
#include "kernels/gemm/repack.h"
#include "kernels/gemm/table.h"

#pragma GCC target("avx2,fma,f16c")

namespace ridge::kernels {

namespace {

constexpr size_t kGroupBytes = kRepackRows * sizeof(BlockQ4_K);
constexpr size_t kScales = 64, kQs = 256;

inline __m256i bcast32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// The activation's 32-element sums as int16 pairs (s0, s2), (s1, s3), (s4, s6), (s5, s7).
inline void bsum_pairs(const BlockQ8_K& y, __m256i (&p)[4]) {
  const __m256i s32 = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums)),
                                        _mm256_set1_epi16(1));
  const __m256i w16 = _mm256_packs_epi32(s32, s32);
  const __m256i order = _mm256_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 0, 1, 4, 5, 2, 3, 6, 7,  //
                                         0, 1, 4, 5, 2, 3, 6, 7, 0, 1, 4, 5, 2, 3, 6, 7);
  const __m256i q = _mm256_shuffle_epi8(w16, order);
  p[0] = _mm256_permutevar8x32_epi32(q, _mm256_set1_epi32(0));
  p[1] = _mm256_permutevar8x32_epi32(q, _mm256_set1_epi32(1));
  p[2] = _mm256_permutevar8x32_epi32(q, _mm256_set1_epi32(4));
  p[3] = _mm256_permutevar8x32_epi32(q, _mm256_set1_epi32(5));
}

// An int32 lane value v (< 2^15) in both int16 halves.
inline __m256i both_halves(__m256i v) { return _mm256_or_si256(v, _mm256_slli_epi32(v, 16)); }

// T tokens against rows 8h .. 8h + 7 of a group.
template <int T>
void half_tokens(const GemmArgs& a, const uint8_t* group, int h, int rows, int64_t t0, float* y) {
  const int64_t nb = a.n_in / kQK_K;
  const BlockQ8_K* act[T];
  for (int t = 0; t < T; ++t) act[t] = reinterpret_cast<const BlockQ8_K*>(a.act + (t0 + t) * a.act_stride);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i m3f = _mm256_set1_epi32(0x3f3f3f3f), m0f = _mm256_set1_epi32(0x0f0f0f0f),
                m30 = _mm256_set1_epi32(0x30303030), m00ff = _mm256_set1_epi32(0x00ff00ff),
                byte = _mm256_set1_epi32(0xff);
  const size_t half = 32 * static_cast<size_t>(h);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * kGroupBytes;
    const __m256i u0 = load256(blk + kScales + half), u1 = load256(blk + kScales + 64 + half),
                  u2 = load256(blk + kScales + 128 + half);
    const __m256i sc[2] = {_mm256_and_si256(u0, m3f), _mm256_or_si256(_mm256_and_si256(u2, m0f),
                                                                      _mm256_and_si256(_mm256_srli_epi32(u0, 2), m30))};
    const __m256i mn[2] = {_mm256_and_si256(u1, m3f), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), m0f),
                                                                      _mm256_and_si256(_mm256_srli_epi32(u1, 2), m30))};
    __m256i sumi[T];
    for (int t = 0; t < T; ++t) sumi[t] = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      __m256i lo16[T], hi16[T];
      for (int t = 0; t < T; ++t) lo16[t] = hi16[t] = _mm256_setzero_si256();
      for (int k = 0; k < 8; ++k) {
        const __m256i w = load256(blk + kQs + 64 * (8 * j + k) + half);
        const __m256i lo = _mm256_and_si256(w, low4), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
        for (int t = 0; t < T; ++t) {
          lo16[t] = _mm256_add_epi16(lo16[t], _mm256_maddubs_epi16(lo, bcast32(act[t][b].qs + 64 * j + 4 * k)));
          hi16[t] = _mm256_add_epi16(hi16[t], _mm256_maddubs_epi16(hi, bcast32(act[t][b].qs + 64 * j + 32 + 4 * k)));
        }
      }
      const __m256i src = sc[j / 2];
      const int shift = 8 * (2 * j % 4);
      const __m256i even = both_halves(_mm256_and_si256(_mm256_srli_epi32(src, shift), byte));
      const __m256i odd = both_halves(_mm256_and_si256(_mm256_srli_epi32(src, shift + 8), byte));
      for (int t = 0; t < T; ++t)
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(_mm256_madd_epi16(lo16[t], even), _mm256_madd_epi16(hi16[t], odd)));
    }
    const __m256i m_pairs[4] = {_mm256_and_si256(mn[0], m00ff), _mm256_and_si256(_mm256_srli_epi32(mn[0], 8), m00ff),
                                _mm256_and_si256(mn[1], m00ff), _mm256_and_si256(_mm256_srli_epi32(mn[1], 8), m00ff)};
    const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
    const __m256 dminv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 32 + 16 * h)));
    for (int t = 0; t < T; ++t) {
      __m256i pairs[4];
      bsum_pairs(act[t][b], pairs);
      __m256i summ = _mm256_madd_epi16(m_pairs[0], pairs[0]);
      for (int i = 1; i < 4; ++i) summ = _mm256_add_epi32(summ, _mm256_madd_epi16(m_pairs[i], pairs[i]));
      const __m256 dy = _mm256_set1_ps(act[t][b].d);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[t]), _mm256_mul_ps(dv, dy), acc[t]);
      acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(summ), _mm256_mul_ps(dminv, dy), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    if (rows == 8) {
      _mm256_storeu_ps(y + t * a.ldy, acc[t]);
    } else {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, acc[t]);
      std::copy(lanes, lanes + rows, y + t * a.ldy);
    }
  }
}

}  // namespace

void gemm_q4_k_r16_avx2(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  for (int64_t r0 = 0; r0 < n_rows; r0 += kRepackRows) {
    const uint8_t* group = a.w + r0 * a.w_stride;
    for (int h = 0; h < 2; ++h) {
      const int rows = static_cast<int>(std::min<int64_t>(8, n_rows - r0 - 8 * h));
      if (rows <= 0) break;
      float* y = a.y + r0 + 8 * h;
      int64_t t0 = 0;
      for (; t0 + 2 <= n_tokens; t0 += 2) half_tokens<2>(a, group, h, rows, t0, y + t0 * a.ldy);
      if (t0 < n_tokens) half_tokens<1>(a, group, h, rows, t0, y + t0 * a.ldy);
    }
  }
}

}  // namespace ridge::kernels
