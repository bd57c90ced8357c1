// AVX2+FMA+F16C inner loops of paged attention over bf16, Q8_0 and Q4_0 K/V caches. Each
// gives the bits of its scalar twin in attention_kv_quant.cpp, whose header spells out the
// arithmetic. A GQA group's query rows share each K row, and each V column decoded once.
// Quantized K is dotted in int8: the query is quantized to Q8_0 once per call, then per
// block maddubs (no saturation: |k| <= 128, |q| <= 127, or Q4_0's nibbles <= 15) and madd
// give 8 exact int32 lanes of 4 products.
// The pragma lets this file build without -mavx2; attention() reaches it only after
// best_isa() has checked the CPU (AVX2, FMA, F16C).
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cstdint>

#include "core/fp16.h"
#include "kernels/attention.h"

#pragma GCC target("avx2,fma,f16c")

#include "kernels/avx2_math.h"

namespace ridge::kernels {

namespace {

constexpr int kBlock = kQK8_0;         // values per block of the quantized query, and of K/V
constexpr int64_t kQueryBlocks = 128;  // query blocks quantized at once: 16 rows of 256

// Units of T holding one block's worth (kBlock values) of a row.
template <class T>
constexpr int64_t kColumnUnits = kBlock / kKvValuesPerUnit<T>;

// Rows [0, n_rows) in groups of NR rows (then NR - 1, ... for the rest), so that each
// group's accumulators are a fixed number of registers: body.template operator()<NR>(r0).
template <int NR, class Body>
inline void row_groups(int64_t r, int64_t n_rows, Body& body) {
  for (; r + NR <= n_rows; r += NR) body.template operator()<NR>(r);
  if constexpr (NR > 1) row_groups<NR - 1>(r, n_rows, body);
}

inline float half_to_float(uint16_t half) { return _cvtsh_ss(half); }
inline float widen(Bf16 x) { return bf16_to_fp32(x.bits); }
inline __m256 load8(const Bf16* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// One column (kBlock values) of a V row as 4 x 8 floats, decoded exactly: a bf16 widened;
// d * q, which float holds exactly (11 significant bits times at most 8).
inline void column_values(const Bf16* v, __m256* x) {
  for (int c = 0; c < 4; ++c) x[c] = load8(v + 8 * c);
}
inline void column_values(const BlockQ8_0* v, __m256* x) {
  const __m256 d = _mm256_set1_ps(half_to_float(v->d));
  for (int c = 0; c < 4; ++c) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(v->qs + 8 * c));
    x[c] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
  }
}
// Bytes 0..7 hold values 0..7 (low nibbles) and 16..23 (high), bytes 8..15 the rest;
// n * d - 8 * d in one FMA is exact as (n - 8) * d is.
inline void column_values(const BlockQ4_0* v, __m256* x) {
  const float d = half_to_float(v->d);
  const __m256 scale = _mm256_set1_ps(d), offset = _mm256_set1_ps(-8 * d);
  for (int half = 0; half < 2; ++half) {
    const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v->qs + 8 * half)));
    const __m256i low = _mm256_and_si256(bytes, _mm256_set1_epi32(0x0f)), high = _mm256_srli_epi32(bytes, 4);
    x[half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(low), scale, offset);
    x[half + 2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(high), scale, offset);
  }
}

// acc[r][d] += p[r][j] * v[j][d] for the first n_columns columns: each column of a run of
// keys is decoded once into `decoded`, then every row of the group adds it key by key, its
// four accumulators in registers (each element sees its keys in order, as in the f32 loop).
template <class T>
void accumulate_columns(const float* p, int64_t p_stride, int64_t n_rep, const T* v, int64_t row_stride,
                        int64_t count, int64_t n_columns, float* acc, int64_t acc_stride) {
  constexpr int64_t kKeys = 16;  // keys decoded at once: a cache block of the default size
  alignas(32) float decoded[kKeys][kBlock];
  for (int64_t col = 0; col < n_columns; ++col) {
    for (int64_t j0 = 0; j0 < count; j0 += kKeys) {
      const int64_t n_keys = std::min(kKeys, count - j0);
      for (int64_t j = 0; j < n_keys; ++j) {
        __m256 x[4];
        column_values(v + (j0 + j) * row_stride + col * kColumnUnits<T>, x);
        for (int c = 0; c < 4; ++c) _mm256_store_ps(decoded[j] + 8 * c, x[c]);
      }
      for (int64_t r = 0; r < n_rep; ++r) {
        const float* pr = p + r * p_stride + j0;
        float* ar = acc + r * acc_stride + col * kBlock;
        __m256 a[4];
        for (int c = 0; c < 4; ++c) a[c] = _mm256_loadu_ps(ar + 8 * c);
        for (int64_t j = 0; j < n_keys; ++j) {
          const __m256 w = _mm256_broadcast_ss(pr + j);
          for (int c = 0; c < 4; ++c) a[c] = _mm256_fmadd_ps(w, _mm256_load_ps(decoded[j] + 8 * c), a[c]);
        }
        for (int c = 0; c < 4; ++c) _mm256_storeu_ps(ar + 8 * c, a[c]);
      }
    }
  }
}

// --- Query quantization: quantize_row_q8_0's float operations, 8 lanes at a time.

struct QuantizedQuery {
  __m256i values[kQueryBlocks];      // [n_rows][n_blocks] int8 x 32
  __m256i eight_sums[kQueryBlocks];  // [n_rows][n_blocks] 8 * sum of values 4l..4l+3, int32 x 8 (Q4_0)
  float scale[kQueryBlocks];         // [n_rows][n_blocks] the f16 scale, widened
};

inline float max_lane(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

// Blocks go 8 at a time so their two divisions (d = amax / 127, 1 / d) are one vector each.
void quantize_query(const float* x, int64_t n_blocks, QuantizedQuery& out) {
  static_assert(kQueryBlocks % 8 == 0);
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  // y + copysign(0.49999997, y) truncated is y rounded half away from zero (std::round) for
  // |y| < 2^23; adding 0.5 would round 0.49999997 up.
  const __m256 below_half = _mm256_set1_ps(0.49999997f);
  for (int64_t b0 = 0; b0 < n_blocks; b0 += 8) {
    const int64_t n = std::min<int64_t>(8, n_blocks - b0);
    alignas(32) float amax[8] = {}, inverse[8];
    for (int64_t i = 0; i < n; ++i) {
      __m256 m = _mm256_setzero_ps();
      for (int c = 0; c < 4; ++c)
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign_bit, _mm256_loadu_ps(x + kBlock * i + 8 * c)));
      amax[i] = max_lane(m);
    }
    const __m256 d = _mm256_div_ps(_mm256_load_ps(amax), _mm256_set1_ps(127.0f));
    const __m256 one = _mm256_set1_ps(1.0f), nonzero = _mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_NEQ_OQ);
    _mm256_store_ps(inverse, _mm256_and_ps(_mm256_div_ps(one, _mm256_blendv_ps(one, d, nonzero)), nonzero));
    const __m128i d16 = _mm256_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(out.scale + b0, _mm256_cvtph_ps(d16));  // b0 + 8 <= kQueryBlocks
    for (int64_t i = 0; i < n; ++i, x += kBlock) {
      __m256i q[4];
      for (int c = 0; c < 4; ++c) {
        const __m256 y = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * c), _mm256_set1_ps(inverse[i]));
        q[c] = _mm256_cvttps_epi32(_mm256_add_ps(y, _mm256_or_ps(_mm256_and_ps(y, sign_bit), below_half)));
      }
      // The packs interleave the 128-bit lanes; the permute puts the 32 bytes back in order.
      const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      const __m256i values = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      out.values[b0 + i] = values;
      out.eight_sums[b0 + i] =
          _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(8), values), _mm256_set1_epi16(1));
    }
  }
}

// A K block as the int8 dots want it, and its 8 lanes of exact sums of 4 products with a
// query block. Q8_0: maddubs needs an unsigned operand, so |k| times q with k's sign.
// Q4_0: the nibbles are unsigned as they are; (n - 8) * q sums to n * q less 8 * sum(q).
struct KeyQ8_0 {
  __m256i values, magnitudes;
};
struct KeyQ4_0 {
  __m256i nibbles;  // values 0..15 in the low 128 bits, 16..31 in the high
};
inline KeyQ8_0 key_block(const BlockQ8_0& b) {
  const __m256i values = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
  return {values, _mm256_abs_epi8(values)};
}
inline KeyQ4_0 key_block(const BlockQ4_0& b) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  return {_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(0x0f))};
}
inline __m256i lane_dots(const KeyQ8_0& k, const QuantizedQuery& query, int64_t at) {
  const __m256i products = _mm256_maddubs_epi16(k.magnitudes, _mm256_sign_epi8(query.values[at], k.values));
  return _mm256_madd_epi16(products, _mm256_set1_epi16(1));
}
inline __m256i lane_dots(const KeyQ4_0& k, const QuantizedQuery& query, int64_t at) {
  const __m256i products = _mm256_maddubs_epi16(k.nibbles, query.values[at]);
  return _mm256_sub_epi32(_mm256_madd_epi16(products, _mm256_set1_epi16(1)), query.eight_sums[at]);
}

// Scores of NR quantized query rows (from row r0 of the chunk) against one key's blocks.
template <int NR, class Block>
inline void quant_scores_heads(const QuantizedQuery& query, int64_t r0, int64_t n_blocks, const Block* k, float scale,
                               float* scores, int64_t score_stride) {
  __m256 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto key = key_block(k[b]);
    const __m256 dk = _mm256_set1_ps(half_to_float(k[b].d));
    for (int r = 0; r < NR; ++r) {
      const int64_t at = (r0 + r) * n_blocks + b;
      const __m256 d = _mm256_mul_ps(_mm256_set1_ps(query.scale[at]), dk);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lane_dots(key, query, at)), d, acc[r]);
    }
  }
  for (int r = 0; r < NR; ++r) scores[r * score_stride] = hsum(acc[r]) * scale;
}

// A query already quantized (quantize_row_q8_0's blocks) in the form the dots take.
void load_query(const BlockQ8_0* q, int64_t n_blocks, QuantizedQuery& out) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const __m256i values = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[b].qs));
    out.values[b] = values;
    out.eight_sums[b] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(8), values), _mm256_set1_epi16(1));
    out.scale[b] = half_to_float(q[b].d);
  }
}

template <class Block>
void quant_scores_of(const QuantizedQuery& query, int64_t r0, int64_t n_rows, int64_t n_blocks, const Block* k,
                     int64_t row_stride, int64_t count, float scale, float* scores, int64_t score_stride) {
  for (int64_t j = 0; j < count; ++j) {
    auto rows = [&]<int NR>(int64_t r) {
      quant_scores_heads<NR>(query, r, n_blocks, k + j * row_stride, scale, scores + (r0 + r) * score_stride + j,
                             score_stride);
    };
    row_groups<4>(0, n_rows, rows);
  }
}

// The query rows in chunks that fit a QuantizedQuery: fill(r0, n_rows, query) puts rows
// r0.. into it (quantized, or loaded as already quantized), then their scores.
template <class Block, class Fill>
void quant_scores_chunked(int64_t n_rep, int64_t d_head, const Block* k, int64_t row_stride, int64_t count, float scale,
                          float* scores, int64_t score_stride, Fill fill) {
  assert(d_head % kBlock == 0 && d_head / kBlock <= kQueryBlocks);
  const int64_t n_blocks = d_head / kBlock;
  const int64_t chunk_rows = kQueryBlocks / n_blocks;
  QuantizedQuery query;
  for (int64_t r0 = 0; r0 < n_rep; r0 += chunk_rows) {
    const int64_t n_rows = std::min(chunk_rows, n_rep - r0);
    fill(r0, n_rows * n_blocks, n_blocks, query);
    quant_scores_of(query, r0, n_rows, n_blocks, k, row_stride, count, scale, scores, score_stride);
  }
}

template <class Block>
void quant_scores(const float* q, int64_t n_rep, int64_t d_head, const Block* k, int64_t row_stride, int64_t count,
                  float scale, float* scores, int64_t score_stride) {
  quant_scores_chunked(n_rep, d_head, k, row_stride, count, scale, scores, score_stride,
                       [&](int64_t r0, int64_t n, int64_t, QuantizedQuery& query) {
                         quantize_query(q + r0 * d_head, n, query);
                       });
}

template <class Block>
void quant_scores(const BlockQ8_0* q, int64_t n_rep, int64_t d_head, const Block* k, int64_t row_stride,
                  int64_t count, float scale, float* scores, int64_t score_stride) {
  quant_scores_chunked(n_rep, d_head, k, row_stride, count, scale, scores, score_stride,
                       [&](int64_t r0, int64_t n, int64_t n_blocks, QuantizedQuery& query) {
                         load_query(q + r0 * n_blocks, n, query);
                       });
}

template <class Block>
void quant_accumulate(const float* p, int64_t p_stride, int64_t n_rep, const Block* v, int64_t row_stride,
                      int64_t count, int64_t d_head, float* acc, int64_t acc_stride) {
  assert(d_head % kBlock == 0);
  accumulate_columns(p, p_stride, n_rep, v, row_stride, count, d_head / kBlock, acc, acc_stride);
}

}  // namespace

// The f32 AVX2 loop's arithmetic on widened rows: NR rows share each K load.
void attention_scores_avx2(const float* q, int64_t n_rep, int64_t d_head, const Bf16* k, int64_t row_stride,
                           int64_t count, float scale, float* scores, int64_t score_stride) {
  const int64_t d8 = d_head / 8 * 8;
  for (int64_t j = 0; j < count; ++j) {
    const Bf16* kj = k + j * row_stride;
    auto rows = [&]<int NR>(int64_t r0) {
      const float* qr = q + r0 * d_head;
      __m256 acc[NR];
      for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
      for (int64_t d = 0; d < d8; d += 8) {
        const __m256 kv = load8(kj + d);
        for (int r = 0; r < NR; ++r) acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(qr + r * d_head + d), kv, acc[r]);
      }
      for (int r = 0; r < NR; ++r) {
        float sum = hsum(acc[r]);
        for (int64_t d = d8; d < d_head; ++d) sum += qr[r * d_head + d] * widen(kj[d]);
        scores[(r0 + r) * score_stride + j] = sum * scale;
      }
    };
    row_groups<4>(0, n_rep, rows);
  }
}

// Whole columns of 32 as for Q8_0/Q4_0; a tail of d_head % 32 per row, in 8s (FMA) and then
// one by one (unfused), as the f32 AVX2 loop does past its last 8.
void attention_accumulate_avx2(const float* p, int64_t p_stride, int64_t n_rep, const Bf16* v, int64_t row_stride,
                               int64_t count, int64_t d_head, float* acc, int64_t acc_stride) {
  const int64_t n_columns = d_head / kBlock, d8 = d_head / 8 * 8;
  accumulate_columns(p, p_stride, n_rep, v, row_stride, count, n_columns, acc, acc_stride);
  for (int64_t r = 0; r < n_rep; ++r) {
    const float* pr = p + r * p_stride;
    float* ar = acc + r * acc_stride;
    for (int64_t d = n_columns * kBlock; d < d8; d += 8) {
      __m256 a = _mm256_loadu_ps(ar + d);
      for (int64_t j = 0; j < count; ++j)
        a = _mm256_fmadd_ps(_mm256_broadcast_ss(pr + j), load8(v + j * row_stride + d), a);
      _mm256_storeu_ps(ar + d, a);
    }
    for (int64_t d = d8; d < d_head; ++d) {
      float s = ar[d];
      for (int64_t j = 0; j < count; ++j) s += pr[j] * widen(v[j * row_stride + d]);
      ar[d] = s;
    }
  }
}

void attention_scores_avx2(const float* q, int64_t n_rep, int64_t d_head, const BlockQ8_0* k, int64_t row_stride,
                           int64_t count, float scale, float* scores, int64_t score_stride) {
  quant_scores(q, n_rep, d_head, k, row_stride, count, scale, scores, score_stride);
}

void attention_scores_avx2(const float* q, int64_t n_rep, int64_t d_head, const BlockQ4_0* k, int64_t row_stride,
                           int64_t count, float scale, float* scores, int64_t score_stride) {
  quant_scores(q, n_rep, d_head, k, row_stride, count, scale, scores, score_stride);
}

void attention_scores_avx2(const BlockQ8_0* q, int64_t n_rep, int64_t d_head, const BlockQ8_0* k,
                           int64_t row_stride, int64_t count, float scale, float* scores, int64_t score_stride) {
  quant_scores(q, n_rep, d_head, k, row_stride, count, scale, scores, score_stride);
}

void attention_scores_avx2(const BlockQ8_0* q, int64_t n_rep, int64_t d_head, const BlockQ4_0* k,
                           int64_t row_stride, int64_t count, float scale, float* scores, int64_t score_stride) {
  quant_scores(q, n_rep, d_head, k, row_stride, count, scale, scores, score_stride);
}

void attention_accumulate_avx2(const float* p, int64_t p_stride, int64_t n_rep, const BlockQ8_0* v,
                               int64_t row_stride, int64_t count, int64_t d_head, float* acc, int64_t acc_stride) {
  quant_accumulate(p, p_stride, n_rep, v, row_stride, count, d_head, acc, acc_stride);
}

void attention_accumulate_avx2(const float* p, int64_t p_stride, int64_t n_rep, const BlockQ4_0* v,
                               int64_t row_stride, int64_t count, int64_t d_head, float* acc, int64_t acc_stride) {
  quant_accumulate(p, p_stride, n_rep, v, row_stride, count, d_head, acc, acc_stride);
}

}  // namespace ridge::kernels
