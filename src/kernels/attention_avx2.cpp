// AVX2+FMA inner loops of paged attention: q.k scores for a GQA group (each K row loaded
// once for all the group's heads), a vectorized exp for the softmax, and p * V
// accumulation with the output slice held in registers across a block's keys. The
// pragma lets this file build without -mavx2; attention() reaches it only after
// best_isa() has checked the CPU.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/attention.h"

#pragma GCC target("avx2,fma")

#include "kernels/avx2_math.h"

namespace ridge::kernels {

namespace {

// Scores of NR heads against one K row.
template <int NR>
inline void scores_heads(const float* q, int64_t d_head, const float* k, float scale, float* scores,
                         int64_t score_stride) {
  __m256 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
  const int64_t d8 = d_head / 8 * 8;
  for (int64_t d = 0; d < d8; d += 8) {
    const __m256 kv = _mm256_loadu_ps(k + d);
    for (int r = 0; r < NR; ++r) acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * d_head + d), kv, acc[r]);
  }
  for (int r = 0; r < NR; ++r) {
    float sum = hsum(acc[r]);
    for (int64_t d = d8; d < d_head; ++d) sum += q[r * d_head + d] * k[d];
    scores[r * score_stride] = sum * scale;
  }
}

}  // namespace

void attention_scores_avx2(const float* q, int64_t n_rep, int64_t d_head, const float* k, int64_t row_stride,
                           int64_t count, float scale, float* scores, int64_t score_stride) {
  for (int64_t j = 0; j < count; ++j) {
    const float* kj = k + j * row_stride;
    int64_t r = 0;
    for (; r + 4 <= n_rep; r += 4) scores_heads<4>(q + r * d_head, d_head, kj, scale, scores + r * score_stride + j, score_stride);
    switch (n_rep - r) {
      case 3: scores_heads<3>(q + r * d_head, d_head, kj, scale, scores + r * score_stride + j, score_stride); break;
      case 2: scores_heads<2>(q + r * d_head, d_head, kj, scale, scores + r * score_stride + j, score_stride); break;
      case 1: scores_heads<1>(q + r * d_head, d_head, kj, scale, scores + r * score_stride + j, score_stride); break;
      default: break;
    }
  }
}

float attention_exp_sum_avx2(float* x, int64_t n, float max) {
  const __m256 m = _mm256_set1_ps(max);
  __m256 sum8 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
    _mm256_storeu_ps(x + i, e);
    sum8 = _mm256_add_ps(sum8, e);
  }
  float sum = hsum(sum8);
  if (i < n) {  // the tail through the same approximation, one lane at a time
    alignas(32) float tail[8] = {};
    for (int64_t t = i; t < n; ++t) tail[t - i] = x[t] - max;
    const __m256 e = exp256(_mm256_load_ps(tail));
    _mm256_store_ps(tail, e);
    for (int64_t t = i; t < n; ++t) {
      x[t] = tail[t - i];
      sum += x[t];
    }
  }
  return sum;
}

void attention_accumulate_avx2(const float* p, int64_t p_stride, int64_t n_rep, const float* v, int64_t row_stride,
                               int64_t count, int64_t d_head, float* acc, int64_t acc_stride) {
  const int64_t d8 = d_head / 8 * 8;
  for (int64_t r = 0; r < n_rep; ++r) {
    const float* pr = p + r * p_stride;
    float* ar = acc + r * acc_stride;
    int64_t d0 = 0;
    // 64 output floats stay in registers while the block's keys stream past.
    for (; d0 + 64 <= d8; d0 += 64) {
      __m256 a[8];
      for (int c = 0; c < 8; ++c) a[c] = _mm256_loadu_ps(ar + d0 + 8 * c);
      for (int64_t j = 0; j < count; ++j) {
        const __m256 pj = _mm256_broadcast_ss(pr + j);
        const float* vj = v + j * row_stride + d0;
        for (int c = 0; c < 8; ++c) a[c] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * c), a[c]);
      }
      for (int c = 0; c < 8; ++c) _mm256_storeu_ps(ar + d0 + 8 * c, a[c]);
    }
    for (; d0 < d8; d0 += 8) {
      __m256 a = _mm256_loadu_ps(ar + d0);
      for (int64_t j = 0; j < count; ++j)
        a = _mm256_fmadd_ps(_mm256_broadcast_ss(pr + j), _mm256_loadu_ps(v + j * row_stride + d0), a);
      _mm256_storeu_ps(ar + d0, a);
    }
    for (int64_t d = d8; d < d_head; ++d) {
      float s = ar[d];
      for (int64_t j = 0; j < count; ++j) s += pr[j] * v[j * row_stride + d];
      ar[d] = s;
    }
  }
}

}  // namespace ridge::kernels
