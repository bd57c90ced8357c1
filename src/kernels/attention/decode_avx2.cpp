// AVX2+FMA inner loops of paged attention: q.k scores for a GQA group (each K row loaded
// once for all the group's heads), a vectorized exp for the softmax, and p * V
// accumulation with the output slice held in registers across a block's keys. K/V rows
// are f32 or f16; an f16 load widens 8 halves in a register (F16C), and the arithmetic
// after it is the f32 path's. The pragma lets this file build without -mavx2;
// attention() reaches it only after best_isa() has checked the CPU (AVX2, FMA, F16C).
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/attention/attention.h"

#pragma GCC target("avx2,fma,f16c")

#include "kernels/avx2_math.h"

namespace ridge::kernels {

namespace {

// 8 consecutive K/V elements as floats, and one element.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline float load1(const float* p) { return *p; }
inline float load1(const uint16_t* p) { return _cvtsh_ss(*p); }

// Scores of NR heads against one K row.
template <int NR, class T>
inline void scores_heads(const float* q, int64_t d_head, const T* k, float scale, float* scores,
                         int64_t score_stride) {
  __m256 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
  const int64_t d8 = d_head / 8 * 8;
  for (int64_t d = 0; d < d8; d += 8) {
    const __m256 kv = load8(k + d);
    for (int r = 0; r < NR; ++r) acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * d_head + d), kv, acc[r]);
  }
  for (int r = 0; r < NR; ++r) {
    float sum = hsum(acc[r]);
    for (int64_t d = d8; d < d_head; ++d) sum += q[r * d_head + d] * load1(k + d);
    scores[r * score_stride] = sum * scale;
  }
}

template <class T>
void scores_rows(const float* q, int64_t n_rep, int64_t d_head, const T* k, int64_t row_stride, int64_t count,
                 float scale, float* scores, int64_t score_stride) {
  for (int64_t j = 0; j < count; ++j) {
    const T* kj = k + j * row_stride;
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

template <class T>
void accumulate_rows(const float* p, int64_t p_stride, int64_t n_rep, const T* v, int64_t row_stride, int64_t count,
                     int64_t d_head, float* acc, int64_t acc_stride) {
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
        const T* vj = v + j * row_stride + d0;
        for (int c = 0; c < 8; ++c) a[c] = _mm256_fmadd_ps(pj, load8(vj + 8 * c), a[c]);
      }
      for (int c = 0; c < 8; ++c) _mm256_storeu_ps(ar + d0 + 8 * c, a[c]);
    }
    for (; d0 < d8; d0 += 8) {
      __m256 a = _mm256_loadu_ps(ar + d0);
      for (int64_t j = 0; j < count; ++j)
        a = _mm256_fmadd_ps(_mm256_broadcast_ss(pr + j), load8(v + j * row_stride + d0), a);
      _mm256_storeu_ps(ar + d0, a);
    }
    for (int64_t d = d8; d < d_head; ++d) {
      float s = ar[d];
      for (int64_t j = 0; j < count; ++j) s += pr[j] * load1(v + j * row_stride + d);
      ar[d] = s;
    }
  }
}

}  // namespace

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

void attention_scores_avx2(const float* q, int64_t n_rep, int64_t d_head, const float* k, int64_t row_stride,
                           int64_t count, float scale, float* scores, int64_t score_stride) {
  scores_rows(q, n_rep, d_head, k, row_stride, count, scale, scores, score_stride);
}

void attention_scores_avx2(const float* q, int64_t n_rep, int64_t d_head, const uint16_t* k, int64_t row_stride,
                           int64_t count, float scale, float* scores, int64_t score_stride) {
  scores_rows(q, n_rep, d_head, k, row_stride, count, scale, scores, score_stride);
}

void attention_accumulate_avx2(const float* p, int64_t p_stride, int64_t n_rep, const float* v, int64_t row_stride,
                               int64_t count, int64_t d_head, float* acc, int64_t acc_stride) {
  accumulate_rows(p, p_stride, n_rep, v, row_stride, count, d_head, acc, acc_stride);
}

void attention_accumulate_avx2(const float* p, int64_t p_stride, int64_t n_rep, const uint16_t* v, int64_t row_stride,
                               int64_t count, int64_t d_head, float* acc, int64_t acc_stride) {
  accumulate_rows(p, p_stride, n_rep, v, row_stride, count, d_head, acc, acc_stride);
}

void kv_row_to_f16_avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

}  // namespace ridge::kernels
