// AVX2+FMA+F16C inner loops of paged attention over bf16 K/V caches. Each gives the bits
// of its scalar twin in attention/kv_bf16.cpp, whose header spells out the arithmetic. A
// GQA group's query rows share each K row, and each V column is widened once.
// The pragma lets this file build without -mavx2; attention() reaches it only after
// best_isa() has checked the CPU (AVX2, FMA, F16C).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "core/fp16.h"
#include "kernels/attention/attention.h"

#pragma GCC target("avx2,fma,f16c")

#include "kernels/avx2_math.h"

namespace ridge::kernels {

namespace {

constexpr int kBlock = 32;  // values per column of V widened at once

// Rows [0, n_rows) in groups of NR rows (then NR - 1, ... for the rest), so that each
// group's accumulators are a fixed number of registers: body.template operator()<NR>(r0).
template <int NR, class Body>
inline void row_groups(int64_t r, int64_t n_rows, Body& body) {
  for (; r + NR <= n_rows; r += NR) body.template operator()<NR>(r);
  if constexpr (NR > 1) row_groups<NR - 1>(r, n_rows, body);
}

inline float widen(Bf16 x) { return bf16_to_fp32(x.bits); }
inline __m256 load8(const Bf16* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// One column (kBlock values) of a V row as 4 x 8 floats, widened exactly.
inline void column_values(const Bf16* v, __m256* x) {
  for (int c = 0; c < 4; ++c) x[c] = load8(v + 8 * c);
}

// acc[r][d] += p[r][j] * v[j][d] for the first n_columns columns: each column of a run of
// keys is widened once into `decoded`, then every row of the group adds it key by key, its
// four accumulators in registers (each element sees its keys in order, as in the f32 loop).
void accumulate_columns(const float* p, int64_t p_stride, int64_t n_rep, const Bf16* v, int64_t row_stride,
                        int64_t count, int64_t n_columns, float* acc, int64_t acc_stride) {
  constexpr int64_t kKeys = 16;  // keys decoded at once: a cache block of the default size
  alignas(32) float decoded[kKeys][kBlock];
  for (int64_t col = 0; col < n_columns; ++col) {
    for (int64_t j0 = 0; j0 < count; j0 += kKeys) {
      const int64_t n_keys = std::min(kKeys, count - j0);
      for (int64_t j = 0; j < n_keys; ++j) {
        __m256 x[4];
        column_values(v + (j0 + j) * row_stride + col * kBlock, x);
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

// Whole columns of 32; a tail of d_head % 32 per row, in 8s (FMA) and then
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

}  // namespace ridge::kernels
