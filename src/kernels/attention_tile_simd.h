// The tiled attention step (attention.h: attention_tile_step_*) written once over a SIMD
// traits type V, included by attention_tile_avx2.cpp (8 lanes) and
// attention_tile_avx512.cpp (16 lanes) after their target pragma and their V. Scores are
// a small GEMM with the keys in vector lanes: K^T is packed once per step, and each
// packed row of 16 keys is multiplied by a broadcast query element for up to
// V::kScoreRows query rows held in registers. P * V holds V::kPvRows accumulator rows of
// up to 4 vectors in registers while the keys stream past, each V row loaded once for
// all of them. Every score, exp and accumulator element goes through the operations
// attention_tile_step_scalar defines, in its order, so the bits match it.
//
// V provides: F (a vector of kWidth floats), zero, load (float / f16), store, set1,
// fmadd(a, b, c) = a * b + c rounded once, mul, exp (the shared polynomial), reduce_max,
// hsum8 (of the 8-lane sum of the key vector's halves: see sum16), select (lanes of a
// key vector in [lane_begin, lane_end) from a, others from b), and pack_kt.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/attention.h"

namespace ridge::kernels {
namespace {

constexpr int kKeys = 16;  // keys per step: lanes of one packed K^T row

// The 16 scores of one query row as kKeys / kWidth vectors.
template <class V>
struct KeyVec {
  typename V::F v[kKeys / V::kWidth];
};

template <class V>
inline KeyVec<V> load_keys(const float* p) {
  KeyVec<V> k;
  for (int i = 0; i < kKeys / V::kWidth; ++i) k.v[i] = V::load(p + i * V::kWidth);
  return k;
}

template <class V>
inline void store_keys(float* p, const KeyVec<V>& k) {
  for (int i = 0; i < kKeys / V::kWidth; ++i) V::store(p + i * V::kWidth, k.v[i]);
}

// Scores of NR consecutive rows: acc[r][lane] = fma chain over d of qt[d][r] * kt[d][lane],
// then times scale, stored to p[r][16].
template <class V, int NR>
void score_rows(const float* qt, int64_t n_rows, const float* kt, int64_t d_head, float scale, float* p) {
  constexpr int kV = kKeys / V::kWidth;
  typename V::F acc[NR][kV];
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < kV; ++i) acc[r][i] = V::zero();
  for (int64_t d = 0; d < d_head; ++d) {
    typename V::F k[kV];
    for (int i = 0; i < kV; ++i) k[i] = V::load(kt + d * kKeys + i * V::kWidth);
    for (int r = 0; r < NR; ++r) {
      const typename V::F q = V::set1(qt[d * n_rows + r]);
      for (int i = 0; i < kV; ++i) acc[r][i] = V::fmadd(q, k[i], acc[r][i]);
    }
  }
  const typename V::F s = V::set1(scale);
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < kV; ++i) V::store(p + r * kKeys + i * V::kWidth, V::mul(acc[r][i], s));
}

template <class V, int NR>
void score_rows_upto(int nr, const float* qt, int64_t n_rows, const float* kt, int64_t d_head, float scale, float* p) {
  if constexpr (NR > 1) {
    if (nr < NR) return score_rows_upto<V, NR - 1>(nr, qt, n_rows, kt, d_head, scale, p);
  }
  score_rows<V, NR>(qt, n_rows, kt, d_head, scale, p);
}

// acc[r][d0 .. d0 + NV * kWidth) += sum over lanes l in [lane_begin, lane_end), in order,
// of p[r][l] * v[l][...], one fma per element per key.
template <class V, int NR, int NV, class T>
void accumulate_rows(const float* p, const T* v, int64_t row_stride, int lane_begin, int lane_end, float* acc,
                     int64_t d_head) {
  typename V::F a[NR][NV];
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < NV; ++c) a[r][c] = V::load(acc + r * d_head + c * V::kWidth);
  for (int l = lane_begin; l < lane_end; ++l) {
    typename V::F x[NV];
    for (int c = 0; c < NV; ++c) x[c] = V::load(v + l * row_stride + c * V::kWidth);
    for (int r = 0; r < NR; ++r) {
      const typename V::F w = V::set1(p[r * kKeys + l]);
      for (int c = 0; c < NV; ++c) a[r][c] = V::fmadd(w, x[c], a[r][c]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < NV; ++c) V::store(acc + r * d_head + c * V::kWidth, a[r][c]);
}

template <class V, int NR, class T>
void accumulate_rows_nv(int nv, const float* p, const T* v, int64_t row_stride, int lane_begin, int lane_end,
                        float* acc, int64_t d_head) {
  switch (nv) {
    case 4: return accumulate_rows<V, NR, 4>(p, v, row_stride, lane_begin, lane_end, acc, d_head);
    case 3: return accumulate_rows<V, NR, 3>(p, v, row_stride, lane_begin, lane_end, acc, d_head);
    case 2: return accumulate_rows<V, NR, 2>(p, v, row_stride, lane_begin, lane_end, acc, d_head);
    default: return accumulate_rows<V, NR, 1>(p, v, row_stride, lane_begin, lane_end, acc, d_head);
  }
}

template <class V, int NR, class T>
void accumulate_rows_upto(int nr, int nv, const float* p, const T* v, int64_t row_stride, int lane_begin,
                          int lane_end, float* acc, int64_t d_head) {
  if constexpr (NR > 1) {
    if (nr < NR) return accumulate_rows_upto<V, NR - 1>(nr, nv, p, v, row_stride, lane_begin, lane_end, acc, d_head);
  }
  accumulate_rows_nv<V, NR>(nv, p, v, row_stride, lane_begin, lane_end, acc, d_head);
}

// exp of one float through the vector polynomial (lane 0), so the rescale factor has the
// bits attention_tile_step_scalar gives it.
template <class V>
inline float exp1(float x) {
  alignas(64) float out[V::kWidth];
  V::store(out, V::exp(V::set1(x)));
  return out[0];
}

template <class V, class T>
void tile_step(const AttentionTileStep<T>& st) {
  const int64_t n_rows = st.n_tokens * st.n_heads, d_head = st.d_head;
  float* kt = st.work;                                       // [d_head][16]
  float* p = st.work + (d_head + 15) / 16 * 16 * kKeys;      // [n_rows][16]
  V::pack_kt(st.k, st.row_stride, st.lane_begin, st.lane_end, d_head, kt);

  // Scores, V::kScoreRows rows at a time.
  for (int64_t r0 = 0; r0 < n_rows; r0 += V::kScoreRows) {
    const int nr = static_cast<int>(std::min<int64_t>(V::kScoreRows, n_rows - r0));
    score_rows_upto<V, V::kScoreRows>(nr, st.qt + r0, n_rows, kt, d_head, st.scale, p + r0 * kKeys);
  }

  // Online softmax per row: p <- exp(score - new max) on the row's lanes, 0 elsewhere.
  for (int64_t row = 0; row < n_rows; ++row) {
    float* pr = p + row * kKeys;
    const int64_t token = row / st.n_heads;
    const int lb = st.token_lane_begin[token], le = st.token_lane_end[token];
    if (lb >= le) {
      std::fill(pr, pr + kKeys, 0.0f);
      continue;
    }
    if (st.softcap > 0)
      for (int l = lb; l < le; ++l) pr[l] = std::tanh(pr[l] / st.softcap) * st.softcap;
    KeyVec<V> s = load_keys<V>(pr);
    for (int i = 0; i < kKeys / V::kWidth; ++i) s.v[i] = V::select(lb, le, i, s.v[i], V::set1(-INFINITY));
    const float block_max = V::reduce_max(s.v);
    const float old_max = st.max[row], new_max = std::max(old_max, block_max);
    if (new_max > old_max) {
      if (old_max != -INFINITY) {  // else the row is empty: nothing to rescale
        const float correction = exp1<V>(old_max - new_max);
        st.sum[row] *= correction;
        float* acc = st.acc + row * d_head;
        const typename V::F c = V::set1(correction);
        int64_t d = 0;
        for (; d + V::kWidth <= d_head; d += V::kWidth) V::store(acc + d, V::mul(V::load(acc + d), c));
        for (; d < d_head; ++d) acc[d] *= correction;
      }
      st.max[row] = new_max;
    }
    const typename V::F m = V::set1(new_max);
    for (int i = 0; i < kKeys / V::kWidth; ++i)
      s.v[i] = V::select(lb, le, i, V::exp(V::sub(s.v[i], m)), V::zero());
    st.sum[row] += V::sum16(s.v);
    store_keys<V>(pr, s);
  }

  // P * V: kPvRows rows by up to 4 vectors of output at a time; the tail of d_head past
  // the last whole vector one fma at a time.
  const int64_t d_vec = d_head / V::kWidth * V::kWidth;
  for (int64_t d0 = 0; d0 < d_vec; d0 += 4 * V::kWidth) {
    const int nv = static_cast<int>(std::min<int64_t>(4, (d_vec - d0) / V::kWidth));
    for (int64_t r0 = 0; r0 < n_rows; r0 += V::kPvRows) {
      const int nr = static_cast<int>(std::min<int64_t>(V::kPvRows, n_rows - r0));
      accumulate_rows_upto<V, V::kPvRows>(nr, nv, p + r0 * kKeys, st.v + d0, st.row_stride, st.lane_begin,
                                          st.lane_end, st.acc + r0 * d_head + d0, d_head);
    }
  }
  if (d_vec < d_head) {
    for (int64_t row = 0; row < n_rows; ++row) {
      float* acc = st.acc + row * d_head;
      for (int l = st.lane_begin; l < st.lane_end; ++l)
        for (int64_t d = d_vec; d < d_head; ++d)
          acc[d] = std::fma(p[row * kKeys + l], V::load1(st.v + l * st.row_stride + d), acc[d]);
    }
  }
}

}  // namespace
}  // namespace ridge::kernels
