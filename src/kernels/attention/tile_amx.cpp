// The tiled attention step on the AMX tile unit (AMX-BF16) for f16 caches, in split bf16
// ("bf16x3"): each f32 operand is x = hi + lo, hi = bf16(x) and lo = bf16(x - hi), both
// rounded to nearest even, and a product is hi*hi + hi*lo + lo*hi with f32 tile
// accumulators. An f16 key or value is exactly hi + lo (11 significant bits; its hi is
// truncated, not rounded, which is cheaper and as exact: split32_exact), so only the
// queries' and probabilities' lo parts round (2^-17 of the value) and the dropped lo*lo
// term is below 2^-18 of a product: about 2^-16 relative per product, where the f32
// steps have 2^-24 (attention/attention.h states the arithmetic; docs/long-context.md the KLD).
//
// Per step of 64 keys, the K rows and the V rows are split once for all the item's rows
// (up to 64 tokens times the GQA group's heads); then, 16 rows at a time, all phases back
// to back so the group's data stays in L1:
//   scores, transposed: sT[64 keys][16 rows] = Ka[keys][d] * Qb  (A: the keys as bf16
//     rows, no transpose; B: the queries pair-interleaved (VNNI), Qb[d / 2][row] =
//     (q[row][2p], q[row][2p + 1]), prepared once per item by attention_amx_queries)
//   the online softmax down the keys with AVX-512, 16 rows in the lanes (no horizontal
//     reductions), the probabilities left where the scores were: P^T, keys by rows
//   P * V and acc = fma(acc, correction, pv) in one of two forms:
//   - an item of several groups (prefill): pvT[d][16 rows] = Vt[d][64 keys] * Pb (A: V
//     transposed, once per step; B: P^T with pairs of keys interleaved, Pb[key / 2][row]
//     = (p[2j][row], p[2j + 1][row]), one permute per pair of keys), and the group's
//     accumulators kept transposed (acc[d][rows]) until attention_tile_finish_amx puts
//     them back in row order after the item's last step;
//   - an item of one group (decode): pv[16 rows][d] = Pa[rows][64 keys] * Vb (A: P
//     transposed to rows, 16 x 16 per 16 keys; B: Vb[key / 2][d] = (v[2j][d], v[2j +
//     1][d]), no transpose), acc in row order.
//   The two forms sum the same products in the same order, so they give the same bits.
//   Transposing P cost each group a fifth of its time at 512 tokens over 4608 keys;
//   transposing V costs a step more than transposing a single group's P (decode at 4096
//   keys: 0.42 ms in the transposed form against 0.32 in the row form), so each form
//   takes the case it is cheaper for.
// A group with fewer rows (an item's last) runs as 16 whose extra rows see no keys:
// their probabilities are zeros and nothing of them is stored.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/attention/attention.h"

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")
// GCC 12 warns that _mm512_cvtph_ps's _mm512_undefined_ps() pass-through is uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/amx_tiles.h"
#include "kernels/avx512_math.h"

namespace ridge::kernels {

namespace {

constexpr int kKeys = kAttentionStepKeys;  // lanes of a step: 4 tiles of 16 keys
constexpr int kTileRows = 16;

inline __m512i as_si(__m512bh x) { return reinterpret_cast<__m512i&>(x); }

// bf16 (as the f32 it stands for) of the 16 halves of h: a lane's top 16 bits.
inline __m512 widen_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

// 32 floats (a: elements 0..15, b: 16..31) as 32 bf16 hi parts and 32 bf16 lo parts, in
// element order.
struct Split {
  __m512i hi, lo;
};
inline Split split32(__m512 a, __m512 b) {
  const __m512i hi = as_si(_mm512_cvtne2ps_pbh(b, a));
  const __m512 ha = widen_bf16(_mm512_castsi512_si256(hi)), hb = widen_bf16(_mm512_extracti64x4_epi64(hi, 1));
  return {hi, as_si(_mm512_cvtne2ps_pbh(_mm512_sub_ps(b, hb), _mm512_sub_ps(a, ha)))};
}

// The cache's values split without rounding. An f16 value (11 significant bits) as the
// f32 x is exactly hi + lo with hi = x truncated to bf16 (its top 16 bits) and lo = x - hi
// (at most 3 significant bits: a bf16 exactly). split32 rounds hi to nearest instead: a
// different pair with the same sum, in 9 vector operations per 32 values where this takes
// 6. A decode step splits 64 K and 64 V rows for its one group of rows; the split was
// about two fifths of the step's samples, and the step is about 5% faster with this one.
inline __m512i top_words() { return _mm512_set1_epi32(static_cast<int>(0xffff0000u)); }

// split32 for 32 f16 values (a: elements 0..15, b: 16..31). Both parts are bf16 values,
// so converting them does not round.
inline Split split32_exact(__m512 a, __m512 b) {
  const __m512 ha = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), top_words()));
  const __m512 hb = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(b), top_words()));
  return {as_si(_mm512_cvtne2ps_pbh(hb, ha)), as_si(_mm512_cvtne2ps_pbh(_mm512_sub_ps(b, hb), _mm512_sub_ps(a, ha)))};
}

// The step's K rows as the A operand of the scores, split: ka[key][d] hi parts, then lo
// parts at ka + kKeys * d_head (bf16, row-major: no transpose).
void pack_keys(const uint16_t* const* k_rows, int64_t d_head, uint16_t* ka) {
  uint16_t* ka_lo = ka + kKeys * d_head;
  for (int key = 0; key < kKeys; ++key) {
    const uint16_t* k = k_rows[key];
    for (int64_t d0 = 0; d0 < d_head; d0 += 32) {
      const Split sp =
          split32_exact(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + d0))),
                        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + d0 + 16))));
      _mm512_storeu_si512(ka + key * d_head + d0, sp.hi);
      _mm512_storeu_si512(ka_lo + key * d_head + d0, sp.lo);
    }
  }
}

// Words 0..15 from the first vector, 16..31 from the second, interleaved: the pairs of a
// VNNI B operand from two of its rows.
alignas(64) constexpr uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                  8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

// The step's V rows as the A operand of P * V, transposed and split: vt[d][key] hi parts
// (kKeys bf16 per d), then lo parts at vt + d_head * kKeys. 16 values of 32 keys at a
// time: two 16 x 16 transposes, then each d's 32 keys split.
void pack_values_transposed(const uint16_t* const* v_rows, int64_t d_head, uint16_t* vt) {
  uint16_t* vt_lo = vt + d_head * kKeys;
  for (int64_t d0 = 0; d0 < d_head; d0 += 16)
    for (int h = 0; h < kKeys / 32; ++h) {
      __m512 a[16], b[16];
      for (int i = 0; i < 16; ++i) {
        a[i] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v_rows[32 * h + i] + d0)));
        b[i] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v_rows[32 * h + 16 + i] + d0)));
      }
      transpose16(a);  // a[j]: value d0 + j of keys 32 h .. 32 h + 15; b[j] of the next 16
      transpose16(b);
      for (int j = 0; j < 16; ++j) {
        const Split sp = split32_exact(a[j], b[j]);
        _mm512_storeu_si512(vt + (d0 + j) * kKeys + 32 * h, sp.hi);
        _mm512_storeu_si512(vt_lo + (d0 + j) * kKeys + 32 * h, sp.lo);
      }
    }
}

// The step's V rows as the B operand of P * V: vb[j][d] = (v[2j][d], v[2j + 1][d]), hi
// parts at vb, lo parts at vb + kKeys / 2 * d_head (dwords).
void pack_value_pairs(const uint16_t* const* v_rows, int64_t d_head, uint32_t* vb) {
  uint32_t* vb_lo = vb + kKeys / 2 * d_head;
  const __m512i interleave = _mm512_load_si512(kInterleave);
  for (int j = 0; j < kKeys / 2; ++j) {
    const uint16_t* v0 = v_rows[2 * j];
    const uint16_t* v1 = v_rows[2 * j + 1];
    for (int64_t d = 0; d < d_head; d += 16) {
      const Split sp = split32_exact(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v0 + d))),
                                     _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v1 + d))));
      _mm512_storeu_si512(vb + j * d_head + d, _mm512_permutexvar_epi16(interleave, sp.hi));
      _mm512_storeu_si512(vb_lo + j * d_head + d, _mm512_permutexvar_epi16(interleave, sp.lo));
    }
  }
}

// Tiles: C 0..3, A 4 (hi) and 5 (lo), B 6 (hi) and 7 (lo), all 16 rows of 64 bytes.
void configure() { configure_tiles({{16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}}); }

// C += A_hi B_hi + A_lo B_hi + A_hi B_lo: B (hi, lo) already in tiles 6 and 7, A (hi, lo)
// loaded into 4 and 5 from a and a_lo, rows a_stride bytes apart.
#define RIDGE_BF16X3_A(C, a, a_lo, a_stride)    \
  RIDGE_TILE_LOAD_STRIDED(4, (a), (a_stride));    \
  RIDGE_TILE_LOAD_STRIDED(5, (a_lo), (a_stride)); \
  RIDGE_TILE_DPBF16PS(C, 4, 6);                   \
  RIDGE_TILE_DPBF16PS(C, 5, 6);                   \
  RIDGE_TILE_DPBF16PS(C, 4, 7)

// Scores of one group of 16 rows against the 64 keys, transposed: sT[key][row] (s_stride
// floats per key) from the keys' A tiles and the rows' B tiles (qb at the group's first
// row, rows_pad dwords per d pair). Per element, for each 32 values of d in order:
// k_hi q_hi, k_lo q_hi, k_hi q_lo.
void score_group(const uint16_t* ka, int64_t d_head, const uint32_t* qb, const uint32_t* qb_lo, int64_t rows_pad,
                 float* sT, int64_t s_stride) {
  const uint16_t* ka_lo = ka + kKeys * d_head;
  RIDGE_TILE_ZERO(0);
  RIDGE_TILE_ZERO(1);
  RIDGE_TILE_ZERO(2);
  RIDGE_TILE_ZERO(3);
  const int64_t a_stride = d_head * 2, b_stride = rows_pad * 4, m_step = 16 * d_head;
  for (int64_t d0 = 0; d0 < d_head; d0 += 32) {
    RIDGE_TILE_LOAD_STRIDED(6, qb + d0 / 2 * rows_pad, b_stride);
    RIDGE_TILE_LOAD_STRIDED(7, qb_lo + d0 / 2 * rows_pad, b_stride);
    RIDGE_BF16X3_A(0, ka + d0, ka_lo + d0, a_stride);
    RIDGE_BF16X3_A(1, ka + m_step + d0, ka_lo + m_step + d0, a_stride);
    RIDGE_BF16X3_A(2, ka + 2 * m_step + d0, ka_lo + 2 * m_step + d0, a_stride);
    RIDGE_BF16X3_A(3, ka + 3 * m_step + d0, ka_lo + 3 * m_step + d0, a_stride);
  }
  RIDGE_TILE_STORE_STRIDED(0, sT, s_stride * 4);
  RIDGE_TILE_STORE_STRIDED(1, sT + 16 * s_stride, s_stride * 4);
  RIDGE_TILE_STORE_STRIDED(2, sT + 32 * s_stride, s_stride * 4);
  RIDGE_TILE_STORE_STRIDED(3, sT + 48 * s_stride, s_stride * 4);
}

// C += A_hi B_hi + A_hi B_lo + A_lo B_hi, B (hi, lo) loaded from b and b_lo.
#define RIDGE_BF16X3(C, b, b_lo, b_stride)           \
  RIDGE_TILE_LOAD_STRIDED(6, (b), (b_stride));       \
  RIDGE_TILE_LOAD_STRIDED(7, (b_lo), (b_stride));    \
  RIDGE_TILE_DPBF16PS(C, 4, 6);                      \
  RIDGE_TILE_DPBF16PS(C, 4, 7);                      \
  RIDGE_TILE_DPBF16PS(C, 5, 6)

// pv[row][0 .. 64) = P * V[.][d0 .. d0 + 64) for one row group, from zero: pa/pa_lo from
// the group's first row (kKeys bf16 per row), 64 floats per row.
void accumulate_rows(const uint16_t* pa, const uint16_t* pa_lo, const uint32_t* vb, int64_t d_head, int64_t d0,
                     float* pv) {
  const uint32_t* vb_lo = vb + kKeys / 2 * d_head;
  const int64_t b_stride = d_head * 4;
  RIDGE_TILE_ZERO(0);
  RIDGE_TILE_ZERO(1);
  RIDGE_TILE_ZERO(2);
  RIDGE_TILE_ZERO(3);
  for (int half = 0; half < kKeys / 32; ++half) {
    RIDGE_TILE_LOAD_STRIDED(4, pa + half * 32, kKeys * 2);
    RIDGE_TILE_LOAD_STRIDED(5, pa_lo + half * 32, kKeys * 2);
    const uint32_t* b = vb + half * 16 * d_head + d0;
    const uint32_t* b_lo = vb_lo + half * 16 * d_head + d0;
    RIDGE_BF16X3(0, b, b_lo, b_stride);
    RIDGE_BF16X3(1, b + 16, b_lo + 16, b_stride);
    RIDGE_BF16X3(2, b + 32, b_lo + 32, b_stride);
    RIDGE_BF16X3(3, b + 48, b_lo + 48, b_stride);
  }
  RIDGE_TILE_STORE_STRIDED(0, pv, 256);
  RIDGE_TILE_STORE_STRIDED(1, pv + 16, 256);
  RIDGE_TILE_STORE_STRIDED(2, pv + 32, 256);
  RIDGE_TILE_STORE_STRIDED(3, pv + 48, 256);
}

#undef RIDGE_BF16X3

// pvT[d][16 rows] for d in [d0, d0 + 64) of one row group, from zero: A = vt (the step's
// V^T, hi and lo), B = the group's P^T pairs (pb, pb_lo: kKeys / 2 rows of 16 dwords),
// C tile i = d0 + 16 i .. d0 + 16 i + 15. Per 32 keys in order, each product as the
// reference orders it: p_hi v_hi, p_hi v_lo, p_lo v_hi.
void accumulate_transposed(const uint16_t* vt, int64_t d_head, int64_t d0, const uint32_t* pb, const uint32_t* pb_lo,
                           float* pvT) {
  const uint16_t* vt_lo = vt + d_head * kKeys;
  RIDGE_TILE_ZERO(0);
  RIDGE_TILE_ZERO(1);
  RIDGE_TILE_ZERO(2);
  RIDGE_TILE_ZERO(3);
  for (int half = 0; half < kKeys / 32; ++half) {
    RIDGE_TILE_LOAD_STRIDED(6, pb + half * 16 * 16, 64);
    RIDGE_TILE_LOAD_STRIDED(7, pb_lo + half * 16 * 16, 64);
    const uint16_t* a = vt + d0 * kKeys + 32 * half;  // d tile i at 16 i rows
    const uint16_t* a_lo = vt_lo + d0 * kKeys + 32 * half;
    RIDGE_BF16X3_A(0, a, a_lo, kKeys * 2);
    RIDGE_BF16X3_A(1, a + 16 * kKeys, a_lo + 16 * kKeys, kKeys * 2);
    RIDGE_BF16X3_A(2, a + 32 * kKeys, a_lo + 32 * kKeys, kKeys * 2);
    RIDGE_BF16X3_A(3, a + 48 * kKeys, a_lo + 48 * kKeys, kKeys * 2);
  }
  RIDGE_TILE_STORE_STRIDED(0, pvT, 64);
  RIDGE_TILE_STORE_STRIDED(1, pvT + 16 * 16, 64);
  RIDGE_TILE_STORE_STRIDED(2, pvT + 32 * 16, 64);
  RIDGE_TILE_STORE_STRIDED(3, pvT + 48 * 16, 64);
}

#undef RIDGE_BF16X3_A

// e^x (x <= 0; NaN lanes only where the caller masks them): x clamped at -104 (e^-104
// is below the smallest float), t = x log2(e), 2^round(t) * 2^f with f = t - round(t) in
// [-1/2, 1/2] and 2^f by its degree-6 Taylor polynomial (error below 1.2e-7 of it; the
// rounding of t adds up to 2^-24 |t| ln 2). Fewer operations than exp512, whose extra
// accuracy the split-bf16 products (2^-16) do not keep.
inline __m512 exp_step(__m512 x) {
  const __m512 t = _mm512_mul_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(1.44269504088896341f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(1.5403530393381609e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// The rows (lanes) whose lane range [row_lb, row_le) holds key l.
inline __mmask16 key_mask(const int32_t* row_lb, const int32_t* row_le, int l) {
  const __m512i key = _mm512_set1_epi32(l);
  return _mm512_cmple_epi32_mask(_mm512_loadu_si512(row_lb), key) &
         _mm512_cmplt_epi32_mask(key, _mm512_loadu_si512(row_le));
}

// P^T of 16 keys' probabilities (p[i]: key i's 16 rows) as 8 rows of the B operand of
// P * V, split: pb[j][row] = (p[2j][row], p[2j + 1][row]) hi parts, lo parts at pb_lo.
inline void store_probability_pairs(const __m512 (&p)[16], uint32_t* pb, uint32_t* pb_lo) {
  const __m512i interleave = _mm512_load_si512(kInterleave);
  for (int j = 0; j < 8; ++j) {
    const Split sp = split32(p[2 * j], p[2 * j + 1]);
    _mm512_storeu_si512(pb + 16 * j, _mm512_permutexvar_epi16(interleave, sp.hi));
    _mm512_storeu_si512(pb_lo + 16 * j, _mm512_permutexvar_epi16(interleave, sp.lo));
  }
}

// The online softmax of 16 rows (lanes) over the step, sT[l][row] (16 floats per key):
// new max, c = e(old max - new max) (exactly 1 when the max did not grow; it multiplies
// zeros while a row is still empty), sum = sum * c + the sum of p in groups of 16 keys
// (p[i] + p[i + 8], then i and i + 4, then (0 + 2) + (1 + 3); the groups added in order).
// The probabilities go to pb (store_probability_pairs; kKeys / 2 rows, lo parts at pb +
// kKeys / 2 * 16) or, with pb null, back into sT. kFull: every row sees every key of the
// step (most steps of a long context), so no lane needs its mask.
template <bool kFull>
void softmax_rows(float* sT, const int32_t* row_lb, const int32_t* row_le, float* max, float* sum, float* correction,
                  uint32_t* pb) {
  const __m512 minus_inf = _mm512_set1_ps(-INFINITY);
  // Four independent maxima (key l into l % 4), then combined: one chain of 64 dependent
  // maxes was a sixth of this function's time. The max is exact, so the order is free.
  __m512 chain[4] = {minus_inf, minus_inf, minus_inf, minus_inf};
#pragma GCC unroll 64
  for (int l = 0; l < kKeys; ++l) {
    const __m512 s = _mm512_loadu_ps(sT + 16 * l);
    chain[l % 4] =
        _mm512_max_ps(chain[l % 4], kFull ? s : _mm512_mask_blend_ps(key_mask(row_lb, row_le, l), minus_inf, s));
  }
  const __m512 block_max = _mm512_max_ps(_mm512_max_ps(chain[0], chain[1]), _mm512_max_ps(chain[2], chain[3]));
  const __m512 old_max = _mm512_loadu_ps(max), new_max = _mm512_max_ps(old_max, block_max);
  const __m512 c = exp_step(_mm512_sub_ps(old_max, new_max));
  __m512 total = _mm512_setzero_ps();
  for (int g = 0; g < kKeys / 16; ++g) {
    __m512 p[16];  // in registers: unrolled (a loop kept them on the stack, stored and loaded back)
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      const int l = 16 * g + i;
      const __m512 e = exp_step(_mm512_sub_ps(_mm512_loadu_ps(sT + 16 * l), new_max));
      p[i] = kFull ? e : _mm512_maskz_mov_ps(key_mask(row_lb, row_le, l), e);
      if (pb == nullptr) _mm512_storeu_ps(sT + 16 * l, p[i]);
    }
    if (pb != nullptr) store_probability_pairs(p, pb + 8 * 16 * g, pb + kKeys / 2 * 16 + 8 * 16 * g);
    __m512 w[8];
    for (int i = 0; i < 8; ++i) w[i] = _mm512_add_ps(p[i], p[i + 8]);
    const __m512 x0 = _mm512_add_ps(w[0], w[4]), x1 = _mm512_add_ps(w[1], w[5]);
    const __m512 x2 = _mm512_add_ps(w[2], w[6]), x3 = _mm512_add_ps(w[3], w[7]);
    const __m512 group_sum = _mm512_add_ps(_mm512_add_ps(x0, x2), _mm512_add_ps(x1, x3));
    total = g == 0 ? group_sum : _mm512_add_ps(total, group_sum);
  }
  _mm512_storeu_ps(sum, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(sum), c), total));
  _mm512_storeu_ps(max, new_max);
  _mm512_storeu_ps(correction, c);
}

// softmax_rows after the softcap (on the lanes each row sees), full or masked.
void softmax(float* sT, const int32_t* row_lb, const int32_t* row_le, float softcap, float* max, float* sum,
             float* correction, uint32_t* pb) {
  if (softcap > 0)
    for (int l = 0; l < kKeys; ++l)
      for (int r = 0; r < 16; ++r)
        if (row_lb[r] <= l && l < row_le[r]) sT[l * 16 + r] = std::tanh(sT[l * 16 + r] / softcap) * softcap;
  const bool full = _mm512_cmpeq_epi32_mask(_mm512_loadu_si512(row_lb), _mm512_setzero_si512()) == 0xffff &&
                    _mm512_cmpeq_epi32_mask(_mm512_loadu_si512(row_le), _mm512_set1_epi32(kKeys)) == 0xffff;
  if (full) softmax_rows<true>(sT, row_lb, row_le, max, sum, correction, pb);
  else softmax_rows<false>(sT, row_lb, row_le, max, sum, correction, pb);
}

// P of 16 rows (sT[l][row]) as the A operand of P * V, split: pa[row][l] hi parts, then
// lo parts at pa_lo, kKeys bf16 per row; `p` is room for the rows' 16 x kKeys floats.
void pack_probability_rows(const float* sT, int64_t s_stride, float* p, uint16_t* pa, uint16_t* pa_lo) {
  for (int b = 0; b < kKeys / 16; ++b) {
    __m512 r[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(sT + (16 * b + i) * s_stride);
    transpose16(r);
    for (int i = 0; i < 16; ++i) _mm512_storeu_ps(p + i * kKeys + 16 * b, r[i]);
  }
  for (int row = 0; row < 16; ++row)
    for (int h = 0; h < kKeys / 32; ++h) {
      const Split sp = split32(_mm512_loadu_ps(p + row * kKeys + 32 * h), _mm512_loadu_ps(p + row * kKeys + 32 * h + 16));
      _mm512_storeu_si512(pa + row * kKeys + 32 * h, sp.hi);
      _mm512_storeu_si512(pa_lo + row * kKeys + 32 * h, sp.lo);
    }
}

}  // namespace

void attention_amx_queries(const float* q, int64_t q_token_stride, int64_t n_tokens, int64_t n_heads, int64_t d_head,
                           float scale, uint16_t* qb) {
  const int64_t n_rows = n_tokens * n_heads, rows_pad = (n_rows + 15) / 16 * 16;
  auto* hi_pairs = reinterpret_cast<uint32_t*>(qb);  // [d_head / 2][rows_pad]
  uint32_t* lo_pairs = hi_pairs + d_head / 2 * rows_pad;
  const __m512 sc = _mm512_set1_ps(scale);
  // 16 rows by 32 values at a time: split in row order, then transposed to pairs by rows.
  for (int64_t r0 = 0; r0 < rows_pad; r0 += 16)
    for (int64_t d0 = 0; d0 < d_head; d0 += 32) {
      __m512 hi[16], lo[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t row = r0 + i;
        if (row >= n_rows) {
          hi[i] = lo[i] = _mm512_setzero_ps();
          continue;
        }
        const float* x = q + row / n_heads * q_token_stride + row % n_heads * d_head + d0;
        const Split sp = split32(_mm512_mul_ps(_mm512_loadu_ps(x), sc), _mm512_mul_ps(_mm512_loadu_ps(x + 16), sc));
        hi[i] = _mm512_castsi512_ps(sp.hi);
        lo[i] = _mm512_castsi512_ps(sp.lo);
      }
      transpose16(hi);
      transpose16(lo);
      for (int p = 0; p < 16; ++p) {
        _mm512_storeu_ps(hi_pairs + (d0 / 2 + p) * rows_pad + r0, hi[p]);
        _mm512_storeu_ps(lo_pairs + (d0 / 2 + p) * rows_pad + r0, lo[p]);
      }
    }
}

// Whether an item of n_rows rows runs the transposed form (several groups).
inline bool transposed_form(int64_t n_rows) { return n_rows > kTileRows; }

void attention_tile_step_amx(const AttentionTileStep<uint16_t>& st) {
  const int64_t n_rows = st.n_tokens * st.n_heads, d_head = st.d_head;
  const int64_t rows_pad = (n_rows + 15) / 16 * 16;
  const bool transposed = transposed_form(n_rows);
  // The step's K and V in tile layouts, shared by all row groups; then one group's scores,
  // probabilities and state, so a group's phases run in L1.
  auto* ka = reinterpret_cast<uint16_t*>(st.work);               // [2][kKeys][d_head] bf16
  uint16_t* vk = ka + 2 * kKeys * d_head;                         // V: [2][d_head][kKeys] bf16 or
  auto* vb = reinterpret_cast<uint32_t*>(vk);                     //    [2][kKeys / 2][d_head] pairs
  auto* sT = reinterpret_cast<float*>(vk + 2 * kKeys * d_head);   // [kKeys][16] scores, then p
  float* p_rows = sT + kKeys * 16;                                 // [16][kKeys] (one-group form)
  auto* pb = reinterpret_cast<uint32_t*>(p_rows + 16 * kKeys);    // [2][kKeys / 2][16] pairs, or
  auto* pa = reinterpret_cast<uint16_t*>(pb);                     //    [2][16][kKeys] bf16
  float* max = reinterpret_cast<float*>(pb + kKeys * 16);         // [16]
  float* sum = max + 16;                                           // [16]
  float* correction = sum + 16;                                    // [16]
  auto* row_lb = reinterpret_cast<int32_t*>(correction + 16);      // [16]
  int32_t* row_le = row_lb + 16;                                   // [16]
  float* pv = reinterpret_cast<float*>(row_le + 16);               // P * V of 64 columns: [64][16] or [16][64]
  auto* zeros = reinterpret_cast<uint16_t*>(pv + 64 * 16);         // [d_head]
  std::fill(zeros, zeros + d_head, uint16_t{0});
  const uint16_t* k_rows[kKeys];
  const uint16_t* v_rows[kKeys];
  for (int l = 0; l < kKeys; ++l) {
    const bool in = l >= st.lane_begin && l < st.lane_end;
    k_rows[l] = in && st.k_rows[l] ? st.k_rows[l] : zeros;
    v_rows[l] = in && st.v_rows[l] ? st.v_rows[l] : zeros;
  }
  pack_keys(k_rows, d_head, ka);
  if (transposed) pack_values_transposed(v_rows, d_head, vk);
  else pack_value_pairs(v_rows, d_head, vb);

  const auto* qb = reinterpret_cast<const uint32_t*>(st.qa);
  const uint32_t* qb_lo = qb + d_head / 2 * rows_pad;
  configure();
  for (int64_t r0 = 0; r0 < n_rows; r0 += kTileRows) {
    const int64_t rows = std::min<int64_t>(kTileRows, n_rows - r0);
    for (int64_t r = 0; r < kTileRows; ++r) {
      const int64_t token = (r0 + r) / st.n_heads;
      const bool real = r < rows;
      row_lb[r] = real ? st.token_lane_begin[token] : 0;
      row_le[r] = real ? st.token_lane_end[token] : 0;
      max[r] = real ? st.max[r0 + r] : -INFINITY;
      sum[r] = real ? st.sum[r0 + r] : 0.0f;
    }
    score_group(ka, d_head, qb + r0, qb_lo + r0, rows_pad, sT, kTileRows);
    softmax(sT, row_lb, row_le, st.softcap, max, sum, correction, transposed ? pb : nullptr);
    for (int64_t r = 0; r < rows; ++r) {
      st.max[r0 + r] = max[r];
      st.sum[r0 + r] = sum[r];
    }
    float* acc = st.acc + r0 * d_head;
    if (transposed) {  // the group's accumulators as acc[d * rows + r]
      const auto mask = static_cast<__mmask16>((1u << rows) - 1);
      const __m512 c = _mm512_loadu_ps(correction);
      for (int64_t d0 = 0; d0 < d_head; d0 += 64) {
        accumulate_transposed(vk, d_head, d0, pb, pb + kKeys / 2 * 16, pv);
        for (int64_t j = 0; j < 64; ++j) {
          float* a = acc + (d0 + j) * rows;
          _mm512_mask_storeu_ps(a, mask, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a), c, _mm512_loadu_ps(pv + 16 * j)));
        }
      }
    } else {
      pack_probability_rows(sT, kTileRows, p_rows, pa, pa + 16 * kKeys);
      for (int64_t d0 = 0; d0 < d_head; d0 += 64) {
        accumulate_rows(pa, pa + 16 * kKeys, vb, d_head, d0, pv);
        for (int64_t r = 0; r < rows; ++r) {
          const __m512 c = _mm512_set1_ps(correction[r]);
          float* a = acc + r * d_head + d0;
          for (int j = 0; j < 64; j += 16)
            _mm512_storeu_ps(a + j, _mm512_fmadd_ps(_mm512_loadu_ps(a + j), c, _mm512_loadu_ps(pv + r * 64 + j)));
        }
      }
    }
  }
}

void attention_tile_finish_amx(const AttentionTileStep<uint16_t>& st) {
  const int64_t n_rows = st.n_tokens * st.n_heads, d_head = st.d_head;
  if (!transposed_form(n_rows)) return;
  float* rows_first = st.work;  // [16][d_head]
  for (int64_t r0 = 0; r0 < n_rows; r0 += kTileRows) {
    const int64_t rows = std::min<int64_t>(kTileRows, n_rows - r0);
    float* acc = st.acc + r0 * d_head;
    if (rows == kTileRows) {
      for (int64_t d0 = 0; d0 < d_head; d0 += 16) {
        __m512 v[16];
        for (int i = 0; i < 16; ++i) v[i] = _mm512_loadu_ps(acc + (d0 + i) * kTileRows);
        transpose16(v);
        for (int r = 0; r < 16; ++r) _mm512_storeu_ps(rows_first + r * d_head + d0, v[r]);
      }
    } else {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t d = 0; d < d_head; ++d) rows_first[r * d_head + d] = acc[d * rows + r];
    }
    std::copy(rows_first, rows_first + rows * d_head, acc);
  }
}

}  // namespace ridge::kernels
