// The tiled attention step with AVX-512F: 16 query rows in one vector
// (attention/tile_simd.h), 32 registers for the score and P * V blocks. attention() reaches it only after
// cpu_supports(Isa::kAvx512Vnni); its bits are the scalar and AVX2 steps'. Q8_0/Q4_0 caches
// take the same softmax and P * V with their scores from vpdpbusd (AVX-512 VNNI) against
// the query's Q8_0 blocks, their bits the scalar Q8_0/Q4_0 step's.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/quant_blocks.h"
#include "kernels/attention/attention.h"

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")
// GCC 12 warns that the intrinsics' _mm512_undefined_*() pass-throughs are uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/avx2_math.h"
#include "kernels/avx512_math.h"
#include "kernels/attention/tile_simd.h"
#include "kernels/attention/tile_quant.h"

namespace ridge::kernels {

namespace {

struct Avx512 {
  using F = __m512;
  static constexpr int kWidth = 16;
  static constexpr int kQkRowVecs = 3;  // 3 x 8 score accumulators of 16 rows
  static constexpr int kQkKeys = 8;
  static constexpr int kPvRows = 6;     // up to 24 output accumulators + 4 V vectors
  static constexpr int kScoreRows = 8;  // keys in lanes (few rows): 8 accumulators

  static F zero() { return _mm512_setzero_ps(); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static F load(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static float load1(const float* p) { return *p; }
  static float load1(const uint16_t* p) { return _cvtsh_ss(*p); }
  static void store(float* p, F x) { _mm512_storeu_ps(p, x); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F exp(F x) { return exp512(x); }

  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }

  // Keys in lanes: lanes part * 16 + i in [lane_begin, lane_end) from a, the others from
  // b; the max of a vector; the sum of a group of 16 lanes (avx2_math.h hsum of the two
  // halves' sum).
  static F select(int lane_begin, int lane_end, int part, F a, F b) {
    const int lo = std::clamp(lane_begin - 16 * part, 0, 16), hi = std::clamp(lane_end - 16 * part, 0, 16);
    const auto in = static_cast<__mmask16>(hi > lo ? ((1u << hi) - 1) & ~((1u << lo) - 1) : 0u);
    return _mm512_mask_blend_ps(in, b, a);
  }
  static float reduce_max(F x) { return _mm512_reduce_max_ps(x); }
  static float sum16(const F* s) {
    const __m256 lo = _mm512_castps512_ps256(s[0]);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s[0]), 1));
    return hsum(_mm256_add_ps(lo, hi));
  }

  // Rows in lanes: the rows (lanes) whose range [row_lb, row_le) holds key l.
  using Mask = __mmask16;
  static Mask key_mask(const int32_t* row_lb, const int32_t* row_le, int l) {
    const __m512i key = _mm512_set1_epi32(l);
    return _mm512_cmple_epi32_mask(_mm512_loadu_si512(row_lb), key) &
           _mm512_cmplt_epi32_mask(key, _mm512_loadu_si512(row_le));
  }
  static F blend(Mask m, F a, F b) { return _mm512_mask_blend_ps(m, b, a); }
  static F maskz(Mask m, F a) { return _mm512_maskz_mov_ps(m, a); }

  // The 32 int8 values of x times d into dst (attention/tile_quant.h).
  static void decode_block(__m256i x, float d, float* dst) {
    const __m512 scale = _mm512_set1_ps(d);
    _mm512_storeu_ps(dst, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(x))), scale));
    _mm512_storeu_ps(dst + 16,
                     _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(x, 1))), scale));
  }

  // kt[d * kt_stride + i] = rows[i][d] for the 16 rows of a group (a zero row outside the
  // step's lanes).
  template <class T>
  static void pack_group(const T* const* rows, int64_t d_head, float* kt, int64_t kt_stride) {
    const int64_t d16 = d_head / 16 * 16;
    for (int64_t d0 = 0; d0 < d16; d0 += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) r[i] = load(rows[i] + d0);
      transpose16(r);
      for (int i = 0; i < 16; ++i) store(kt + (d0 + i) * kt_stride, r[i]);
    }
    for (int64_t d = d16; d < d_head; ++d)
      for (int i = 0; i < 16; ++i) kt[d * kt_stride + i] = load1(rows[i] + d);
  }
};

// --- Q8_0 and Q4_0 caches (attention/tile_quant.h: K packed, V decoded).

// The scores of one block of lanes, from the exact block sums and their scales: acc is
// float(isum) * d for the first block, then fma(float(isum), d, acc).
inline __m512 add_block(__m512i isum, __m512 d, __m512 acc, bool first) {
  const __m512 x = _mm512_cvtepi32_ps(isum);
  return first ? _mm512_mul_ps(x, d) : _mm512_fmadd_ps(x, d, acc);
}

// Rows in lanes: NRV row vectors by KK keys, s[l][row] for lanes l0 .. l0 + KK; qw and qd
// point at the first row of attention_quant_queries' words and scales.
template <int NRV, int KK>
void quant_score_block(const uint32_t* qw, const float* qd, int64_t rows_pad, const int8_t* kx, const float* kd,
                       const int32_t* kbias, int l0, int64_t d_head, float scale, float* s) {
  __m512 acc[NRV][KK];
  for (int64_t b = 0; b < d_head / kBlock; ++b) {
    __m512i isum[NRV][KK];
    for (int l = 0; l < KK; ++l) {
      const __m512i bias = _mm512_set1_epi32(kbias[b * kKeys + l0 + l]);
      for (int i = 0; i < NRV; ++i) isum[i][l] = bias;
    }
    for (int w = 0; w < kBlock / 4; ++w) {
      __m512i q[NRV];
      for (int i = 0; i < NRV; ++i) q[i] = _mm512_loadu_si512(qw + (b * 8 + w) * rows_pad + i * 16);
      for (int l = 0; l < KK; ++l) {
        int32_t word;
        std::memcpy(&word, kx + (l0 + l) * d_head + b * kBlock + 4 * w, 4);
        const __m512i k = _mm512_set1_epi32(word);
        for (int i = 0; i < NRV; ++i) isum[i][l] = _mm512_dpbusd_epi32(isum[i][l], q[i], k);
      }
    }
    for (int l = 0; l < KK; ++l) {
      const __m512 k_scale = _mm512_set1_ps(kd[b * kKeys + l0 + l]);
      for (int i = 0; i < NRV; ++i) {
        const __m512 d = _mm512_mul_ps(_mm512_loadu_ps(qd + b * rows_pad + i * 16), k_scale);
        acc[i][l] = add_block(isum[i][l], d, acc[i][l], b == 0);
      }
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
  for (int l = 0; l < KK; ++l)
    for (int i = 0; i < NRV; ++i) _mm512_storeu_ps(s + (l0 + l) * rows_pad + i * 16, _mm512_mul_ps(acc[i][l], sc));
}

constexpr int kQuantRowVecs = 3, kQuantKeys = 4;  // 12 int32 and 12 float accumulators

template <int NRV>
void quant_score_block_upto(int nrv, const uint32_t* qw, const float* qd, int64_t rows_pad, const int8_t* kx,
                            const float* kd, const int32_t* kbias, int l0, int64_t d_head, float scale, float* s) {
  if constexpr (NRV > 1) {
    if (nrv < NRV) return quant_score_block_upto<NRV - 1>(nrv, qw, qd, rows_pad, kx, kd, kbias, l0, d_head, scale, s);
  }
  quant_score_block<NRV, kQuantKeys>(qw, qd, rows_pad, kx, kd, kbias, l0, d_head, scale, s);
}

// Keys in lanes: NR rows against the 16 keys of group g, kt = their K words transposed
// ([d_head / 4][16]); p[row][g * 16 + lane].
template <int NR>
void quant_score_rows(const uint32_t* qw, const float* qd, int64_t rows_pad, const int32_t* kt, const float* kd,
                      const int32_t* kbias, int g, int64_t d_head, float scale, float* p) {
  __m512 acc[NR];
  for (int64_t b = 0; b < d_head / kBlock; ++b) {
    const __m512i bias = _mm512_loadu_si512(kbias + b * kKeys + g * 16);
    const __m512 k_scale = _mm512_loadu_ps(kd + b * kKeys + g * 16);
    __m512i isum[NR];
    for (int r = 0; r < NR; ++r) isum[r] = bias;
    for (int w = 0; w < kBlock / 4; ++w) {
      const __m512i k = _mm512_loadu_si512(kt + (b * 8 + w) * 16);
      for (int r = 0; r < NR; ++r)
        isum[r] = _mm512_dpbusd_epi32(isum[r], _mm512_set1_epi32(static_cast<int>(qw[(b * 8 + w) * rows_pad + r])), k);
    }
    for (int r = 0; r < NR; ++r)
      acc[r] = add_block(isum[r], _mm512_mul_ps(_mm512_set1_ps(qd[b * rows_pad + r]), k_scale), acc[r], b == 0);
  }
  const __m512 sc = _mm512_set1_ps(scale);
  for (int r = 0; r < NR; ++r) _mm512_storeu_ps(p + r * kKeys + g * 16, _mm512_mul_ps(acc[r], sc));
}

template <int NR>
void quant_score_rows_upto(int nr, const uint32_t* qw, const float* qd, int64_t rows_pad, const int32_t* kt,
                           const float* kd, const int32_t* kbias, int g, int64_t d_head, float scale, float* p) {
  if constexpr (NR > 1) {
    if (nr < NR) return quant_score_rows_upto<NR - 1>(nr, qw, qd, rows_pad, kt, kd, kbias, g, d_head, scale, p);
  }
  quant_score_rows<NR>(qw, qd, rows_pad, kt, kd, kbias, g, d_head, scale, p);
}

// The 16 keys of group g from kx, as 4-byte words transposed: kt[w][i] = word w of key
// g * 16 + i.
void transpose_key_words(const int8_t* kx, int g, int64_t d_head, int32_t* kt) {
  const int64_t n_words = d_head / 4;
  for (int64_t w0 = 0; w0 < n_words; w0 += 16) {
    const int64_t n = std::min<int64_t>(16, n_words - w0);
    const auto mask = static_cast<__mmask16>((1u << n) - 1);
    __m512 r[16];
    for (int i = 0; i < 16; ++i)
      r[i] = _mm512_castsi512_ps(_mm512_maskz_loadu_epi32(mask, kx + (g * 16 + i) * d_head + 4 * w0));
    transpose16(r);
    for (int64_t j = 0; j < n; ++j) _mm512_storeu_ps(kt + (w0 + j) * 16, r[j]);
  }
}

template <class Block>
void quant_step(const AttentionTileStep<Block>& st) {
  const int64_t n_rows = st.n_tokens * st.n_heads, d_head = st.d_head;
  const auto [rows_pad, qw, qd, vf, kx, kd, kbias, rest] = quant_step_buffers(st);
  const int g_begin = st.lane_begin / kGroup, g_end = (st.lane_end + kGroup - 1) / kGroup;
  pack_keys(st, g_begin * kGroup, g_end * kGroup, kx, kd, kbias);
  const float* v_rows[kKeys];
  decode_values<Avx512>(st, vf, v_rows);
  if (n_rows <= 8) {
    auto* kt = reinterpret_cast<int32_t*>(rest);  // [d_head / 4][16]
    float* p = rest + d_head / 4 * 16;            // [n_rows][kKeys]
    float* correction = p + n_rows * kKeys;       // [n_rows]
    for (int g = g_begin; g < g_end; ++g) {
      transpose_key_words(kx, g, d_head, kt);
      quant_score_rows_upto<8>(static_cast<int>(n_rows), qw, qd, rows_pad, kt, kd, kbias, g, d_head, st.scale, p);
    }
    finish_keys_in_lanes<Avx512>(st, p, correction, v_rows);
  } else {
    float* s = rest;                     // [kKeys][rows_pad]
    float* stats = s + kKeys * rows_pad;  // [5][rows_pad]
    for_row_groups(rows_pad / 16, kQuantRowVecs, [&](int64_t v0, int nrv) {
      const int64_t r0 = v0 * 16;
      for (int l0 = st.lane_begin / kQuantKeys * kQuantKeys; l0 < st.lane_end; l0 += kQuantKeys)
        quant_score_block_upto<kQuantRowVecs>(nrv, qw + r0, qd + r0, rows_pad, kx, kd, kbias, l0, d_head, st.scale,
                                              s + r0);
    });
    finish_rows_in_lanes<Avx512>(st, s, stats, v_rows);
  }
}

}  // namespace

void attention_tile_step_avx512(const AttentionTileStep<float>& step) { tile_step<Avx512>(step); }
void attention_tile_step_avx512(const AttentionTileStep<uint16_t>& step) { tile_step<Avx512>(step); }
void attention_tile_step_avx512(const AttentionTileStep<BlockQ8_0>& step) { quant_step(step); }
void attention_tile_step_avx512(const AttentionTileStep<BlockQ4_0>& step) { quant_step(step); }

}  // namespace ridge::kernels
