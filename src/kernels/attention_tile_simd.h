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
#include <type_traits>

#include "kernels/attention.h"

namespace ridge::kernels {
namespace {

constexpr int kKeys = 16;  // keys per step: lanes of one packed K^T row

inline int64_t round_up16(int64_t n) { return (n + 15) / 16 * 16; }

// exp of one float through the vector polynomial (lane 0): the scalar step's bits.
template <class V>
inline float exp1(float x) {
  alignas(64) float out[V::kWidth];
  V::store(out, V::exp(V::set1(x)));
  return out[0];
}

// Scores of NRV row vectors (kWidth rows each) against keys [l0, l0 + kQkKeys):
// s[l][r] = fma chain over d of qt[d][r] * kt[d][l], times scale. Each packed K element is
// broadcast once for NRV * kWidth rows.
template <class V, int NRV>
void score_block(const float* qt, int64_t qt_stride, const float* kt, int64_t d_head, float scale, float* s,
                 int64_t s_stride) {
  constexpr int kK = V::kQkKeys;
  typename V::F acc[NRV][kK];
  for (int i = 0; i < NRV; ++i)
    for (int l = 0; l < kK; ++l) acc[i][l] = V::zero();
  for (int64_t d = 0; d < d_head; ++d) {
    typename V::F q[NRV];
    for (int i = 0; i < NRV; ++i) q[i] = V::load(qt + d * qt_stride + i * V::kWidth);
    for (int l = 0; l < kK; ++l) {
      const typename V::F k = V::set1(kt[d * kKeys + l]);
      for (int i = 0; i < NRV; ++i) acc[i][l] = V::fmadd(q[i], k, acc[i][l]);
    }
  }
  const typename V::F sc = V::set1(scale);
  for (int l = 0; l < kK; ++l)
    for (int i = 0; i < NRV; ++i) V::store(s + l * s_stride + i * V::kWidth, V::mul(acc[i][l], sc));
}

template <class V, int NRV>
void score_block_upto(int nrv, const float* qt, int64_t qt_stride, const float* kt, int64_t d_head, float scale,
                      float* s, int64_t s_stride) {
  if constexpr (NRV > 1) {
    if (nrv < NRV) return score_block_upto<V, NRV - 1>(nrv, qt, qt_stride, kt, d_head, scale, s, s_stride);
  }
  score_block<V, NRV>(qt, qt_stride, kt, d_head, scale, s, s_stride);
}

// acc[r][d0 .. d0 + NV * kWidth) = acc * correction[r], then += p(r, l) * v[l][...] for
// lanes l in [lane_begin, lane_end) in order, one fma per element per key; p(r, l) is at
// p[r * p_row + l * p_key].
template <class V, int NR, int NV, class T>
void accumulate_rows(const float* p, int64_t p_row, int64_t p_key, const float* correction, const T* v,
                     int64_t v_stride, int lane_begin, int lane_end, float* acc, int64_t d_head) {
  typename V::F a[NR][NV];
  for (int r = 0; r < NR; ++r) {
    const typename V::F c = V::set1(correction[r]);
    for (int j = 0; j < NV; ++j) a[r][j] = V::mul(V::load(acc + r * d_head + j * V::kWidth), c);
  }
  for (int l = lane_begin; l < lane_end; ++l) {
    typename V::F x[NV];
    for (int j = 0; j < NV; ++j) x[j] = V::load(v + l * v_stride + j * V::kWidth);
    for (int r = 0; r < NR; ++r) {
      const typename V::F w = V::set1(p[r * p_row + l * p_key]);
      for (int j = 0; j < NV; ++j) a[r][j] = V::fmadd(w, x[j], a[r][j]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int j = 0; j < NV; ++j) V::store(acc + r * d_head + j * V::kWidth, a[r][j]);
}

template <class V, int NR, class T>
void accumulate_rows_nv(int nv, const float* p, int64_t p_row, int64_t p_key, const float* correction, const T* v,
                        int64_t v_stride, int lane_begin, int lane_end, float* acc, int64_t d_head) {
  switch (nv) {
    case 4: return accumulate_rows<V, NR, 4>(p, p_row, p_key, correction, v, v_stride, lane_begin, lane_end, acc, d_head);
    case 3: return accumulate_rows<V, NR, 3>(p, p_row, p_key, correction, v, v_stride, lane_begin, lane_end, acc, d_head);
    case 2: return accumulate_rows<V, NR, 2>(p, p_row, p_key, correction, v, v_stride, lane_begin, lane_end, acc, d_head);
    default: return accumulate_rows<V, NR, 1>(p, p_row, p_key, correction, v, v_stride, lane_begin, lane_end, acc, d_head);
  }
}

template <class V, int NR, class T>
void accumulate_rows_upto(int nr, int nv, const float* p, int64_t p_row, int64_t p_key, const float* correction,
                          const T* v, int64_t v_stride, int lane_begin, int lane_end, float* acc, int64_t d_head) {
  if constexpr (NR > 1) {
    if (nr < NR)
      return accumulate_rows_upto<V, NR - 1>(nr, nv, p, p_row, p_key, correction, v, v_stride, lane_begin, lane_end,
                                             acc, d_head);
  }
  accumulate_rows_nv<V, NR>(nv, p, p_row, p_key, correction, v, v_stride, lane_begin, lane_end, acc, d_head);
}

// P * V for all rows, each row's rescale folded into the load of its accumulators:
// kPvRows rows by up to 4 vectors of output at a time; the tail of d_head one element at
// a time, in the same order.
template <class V, class T>
void accumulate_all(int64_t n_rows, const float* p, int64_t p_row, int64_t p_key, const float* correction, const T* v,
                    int64_t v_stride, int lane_begin, int lane_end, float* acc, int64_t d_head) {
  const int64_t d_vec = d_head / V::kWidth * V::kWidth;
  for (int64_t d0 = 0; d0 < d_vec; d0 += 4 * V::kWidth) {
    const int nv = static_cast<int>(std::min<int64_t>(4, (d_vec - d0) / V::kWidth));
    for (int64_t r0 = 0; r0 < n_rows; r0 += V::kPvRows) {
      const int nr = static_cast<int>(std::min<int64_t>(V::kPvRows, n_rows - r0));
      accumulate_rows_upto<V, V::kPvRows>(nr, nv, p + r0 * p_row, p_row, p_key, correction + r0, v + d0, v_stride,
                                          lane_begin, lane_end, acc + r0 * d_head + d0, d_head);
    }
  }
  for (int64_t row = 0; row < n_rows && d_vec < d_head; ++row) {
    float* a = acc + row * d_head;
    for (int64_t d = d_vec; d < d_head; ++d) a[d] *= correction[row];
    for (int l = lane_begin; l < lane_end; ++l)
      for (int64_t d = d_vec; d < d_head; ++d) a[d] = std::fma(p[row * p_row + l * p_key], V::load1(v + l * v_stride + d), a[d]);
  }
}

// The online softmax of kWidth rows (lanes) over the step's keys, s[l][row] -> p in
// place: new max, correction = e(old max - new max) (exactly 1 when the max did not grow;
// it multiplies zeros while a row is still empty), sum = sum * correction + sum16(p).
template <class V>
void softmax_rows(float* s, int64_t s_stride, const int32_t* row_bits, int lane_begin, int lane_end, float* max,
                  float* sum, float* correction) {
  using F = typename V::F;
  const F minus_inf = V::set1(-INFINITY);
  F block_max = minus_inf;
  for (int l = lane_begin; l < lane_end; ++l) {
    F x = V::blend(V::key_mask(row_bits, l), V::load(s + l * s_stride), minus_inf);
    V::store(s + l * s_stride, x);
    block_max = V::max(block_max, x);
  }
  const F old_max = V::load(max), new_max = V::max(old_max, block_max);
  const F c = V::exp(V::sub(old_max, new_max));
  auto p_at = [&](int l) {
    if (l < lane_begin || l >= lane_end) return V::zero();
    const F p = V::maskz(V::key_mask(row_bits, l), V::exp(V::sub(V::load(s + l * s_stride), new_max)));
    V::store(s + l * s_stride, p);
    return p;
  };
  F w[8];
  for (int i = 0; i < 8; ++i) w[i] = V::add(p_at(i), p_at(i + 8));
  const F x0 = V::add(w[0], w[4]), x1 = V::add(w[1], w[5]), x2 = V::add(w[2], w[6]), x3 = V::add(w[3], w[7]);
  const F total = V::add(V::add(x0, x2), V::add(x1, x3));
  V::store(sum, V::add(V::mul(V::load(sum), c), total));
  V::store(max, new_max);
  V::store(correction, c);
}

// Many rows (a tile of tokens): rows in vector lanes. Scores are a GEMM whose every packed
// K element is broadcast for kQkRowVecs vectors of rows, and the softmax runs down the
// keys for a vector of rows at a time, with no horizontal reductions.
template <class V, class T>
void step_rows_in_lanes(const AttentionTileStep<T>& st) {
  const int64_t n_rows = st.n_tokens * st.n_heads, d_head = st.d_head;
  const int64_t rows_pad = round_up16(n_rows), d_pad = round_up16(d_head);
  float* kt = st.work;                         // [d_pad][16] K^T
  float* vf = kt + d_pad * kKeys;              // [16][d_head] V rows widened (f16 caches)
  float* s = vf + kKeys * d_head;              // [16][rows_pad] scores, then p
  float* max = s + kKeys * rows_pad;           // [rows_pad]
  float* sum = max + rows_pad;                 // [rows_pad]
  float* correction = sum + rows_pad;          // [rows_pad]
  auto* row_bits = reinterpret_cast<int32_t*>(correction + rows_pad);  // [rows_pad] lanes a row sees
  V::pack_kt(st.k, st.row_stride, st.lane_begin, st.lane_end, d_head, kt);
  const float* v = vf;
  int64_t v_stride = d_head;
  if constexpr (std::is_same_v<T, float>) {
    v = st.v;
    v_stride = st.row_stride;
  } else {
    const int64_t d_vec = d_head / V::kWidth * V::kWidth;
    for (int l = st.lane_begin; l < st.lane_end; ++l) {
      int64_t d = 0;
      for (; d < d_vec; d += V::kWidth) V::store(vf + l * d_head + d, V::load(st.v + l * st.row_stride + d));
      for (; d < d_head; ++d) vf[l * d_head + d] = V::load1(st.v + l * st.row_stride + d);
    }
  }
  for (int64_t i = 0; i < st.n_tokens; ++i) {
    const int lb = st.token_lane_begin[i], le = st.token_lane_end[i];
    const auto bits = lb < le ? static_cast<int32_t>(((1u << le) - 1) & ~((1u << lb) - 1)) : 0;
    std::fill(row_bits + i * st.n_heads, row_bits + (i + 1) * st.n_heads, bits);
  }
  std::fill(row_bits + n_rows, row_bits + rows_pad, 0);
  std::copy(st.max, st.max + n_rows, max);
  std::fill(max + n_rows, max + rows_pad, -INFINITY);
  std::copy(st.sum, st.sum + n_rows, sum);
  std::fill(sum + n_rows, sum + rows_pad, 0.0f);

  // Scores s[l][row], kQkRowVecs row vectors by kQkKeys keys at a time (the last groups
  // evened out, so none is left with a single vector to amortize each broadcast over).
  const int64_t n_vecs = rows_pad / V::kWidth;
  for (int64_t v0 = 0; v0 < n_vecs;) {
    int64_t nrv = std::min<int64_t>(V::kQkRowVecs, n_vecs - v0);
    if (nrv == V::kQkRowVecs && n_vecs - v0 == V::kQkRowVecs + 1 && V::kQkRowVecs > 2) nrv = 2;
    const int64_t r0 = v0 * V::kWidth;
    for (int l0 = st.lane_begin / V::kQkKeys * V::kQkKeys; l0 < st.lane_end; l0 += V::kQkKeys)
      score_block_upto<V, V::kQkRowVecs>(static_cast<int>(nrv), st.qt + r0, st.qt_stride, kt + l0, d_head, st.scale,
                                         s + l0 * rows_pad + r0, rows_pad);
    v0 += nrv;
  }
  if (st.softcap > 0)
    for (int64_t row = 0; row < n_rows; ++row)
      for (int l = 0; l < kKeys; ++l)
        if (row_bits[row] >> l & 1) s[l * rows_pad + row] = std::tanh(s[l * rows_pad + row] / st.softcap) * st.softcap;
  for (int64_t r0 = 0; r0 < rows_pad; r0 += V::kWidth)
    softmax_rows<V>(s + r0, rows_pad, row_bits + r0, st.lane_begin, st.lane_end, max + r0, sum + r0, correction + r0);

  accumulate_all<V>(n_rows, s, 1, rows_pad, correction, v, v_stride, st.lane_begin, st.lane_end, st.acc, d_head);
  std::copy(max, max + n_rows, st.max);
  std::copy(sum, sum + n_rows, st.sum);
}


// Scores of NR rows, keys in lanes: acc[r][lane] = fma chain over d of qt[d][r] *
// kt[d][lane], times scale, stored to p[r][16].
template <class V, int NR>
void score_rows(const float* qt, int64_t qt_stride, const float* kt, int64_t d_head, float scale, float* p) {
  constexpr int kV = kKeys / V::kWidth;
  typename V::F acc[NR][kV];
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < kV; ++i) acc[r][i] = V::zero();
  for (int64_t d = 0; d < d_head; ++d) {
    typename V::F k[kV];
    for (int i = 0; i < kV; ++i) k[i] = V::load(kt + d * kKeys + i * V::kWidth);
    for (int r = 0; r < NR; ++r) {
      const typename V::F q = V::set1(qt[d * qt_stride + r]);
      for (int i = 0; i < kV; ++i) acc[r][i] = V::fmadd(q, k[i], acc[r][i]);
    }
  }
  const typename V::F sc = V::set1(scale);
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < kV; ++i) V::store(p + r * kKeys + i * V::kWidth, V::mul(acc[r][i], sc));
}

template <class V, int NR>
void score_rows_upto(int nr, const float* qt, int64_t qt_stride, const float* kt, int64_t d_head, float scale,
                     float* p) {
  if constexpr (NR > 1) {
    if (nr < NR) return score_rows_upto<V, NR - 1>(nr, qt, qt_stride, kt, d_head, scale, p);
  }
  score_rows<V, NR>(qt, qt_stride, kt, d_head, scale, p);
}

// Few rows (decode: one token's heads): keys in vector lanes, so no lane is idle; the
// softmax reduces across each row's lanes.
template <class V, class T>
void step_keys_in_lanes(const AttentionTileStep<T>& st) {
  const int64_t n_rows = st.n_tokens * st.n_heads, d_head = st.d_head;
  float* kt = st.work;                              // [d_pad][16] K^T
  float* p = kt + round_up16(d_head) * kKeys;       // [n_rows][16] scores, then p
  float* correction = p + n_rows * kKeys;           // [n_rows]
  V::pack_kt(st.k, st.row_stride, st.lane_begin, st.lane_end, d_head, kt);
  for (int64_t r0 = 0; r0 < n_rows; r0 += V::kScoreRows) {
    const int nr = static_cast<int>(std::min<int64_t>(V::kScoreRows, n_rows - r0));
    score_rows_upto<V, V::kScoreRows>(nr, st.qt + r0, st.qt_stride, kt, d_head, st.scale, p + r0 * kKeys);
  }
  for (int64_t row = 0; row < n_rows; ++row) {
    float* pr = p + row * kKeys;
    const int64_t token = row / st.n_heads;
    const int lb = st.token_lane_begin[token], le = st.token_lane_end[token];
    correction[row] = 1.0f;
    if (lb >= le) {
      std::fill(pr, pr + kKeys, 0.0f);
      continue;
    }
    if (st.softcap > 0)
      for (int l = lb; l < le; ++l) pr[l] = std::tanh(pr[l] / st.softcap) * st.softcap;
    typename V::F x[kKeys / V::kWidth];
    for (int i = 0; i < kKeys / V::kWidth; ++i)
      x[i] = V::select(lb, le, i, V::load(pr + i * V::kWidth), V::set1(-INFINITY));
    const float old_max = st.max[row], new_max = std::max(old_max, V::reduce_max(x));
    if (new_max > old_max) {
      if (old_max != -INFINITY) {  // else the row is empty: nothing to rescale
        correction[row] = exp1<V>(old_max - new_max);
        st.sum[row] *= correction[row];
      }
      st.max[row] = new_max;
    }
    const typename V::F m = V::set1(new_max);
    for (int i = 0; i < kKeys / V::kWidth; ++i) {
      x[i] = V::select(lb, le, i, V::exp(V::sub(x[i], m)), V::zero());
      V::store(pr + i * V::kWidth, x[i]);
    }
    st.sum[row] += V::sum16(x);
  }
  accumulate_all<V>(n_rows, p, kKeys, 1, correction, st.v, st.row_stride, st.lane_begin, st.lane_end, st.acc, d_head);
}

// The two layouts give the same bits (both are the scalar step's arithmetic); the choice
// only follows the number of rows.
template <class V, class T>
void tile_step(const AttentionTileStep<T>& st) {
  if (st.n_tokens * st.n_heads <= 8)
    step_keys_in_lanes<V>(st);
  else
    step_rows_in_lanes<V>(st);
}

}  // namespace
}  // namespace ridge::kernels
