// The tiled attention step (attention/attention.h: attention_tile_step_*) written once over a SIMD
// traits type V, included by attention/tile_avx2.cpp (8 lanes) and
// attention/tile_avx512.cpp (16 lanes) after their target pragma and their V. K^T is
// packed once per step. A tile of many rows puts rows in vector lanes: scores are a small
// GEMM (each packed K element broadcast for V::kQkRowVecs vectors of rows) and the
// softmax runs down the keys for a vector of rows at once. Few rows (decode) put keys in
// lanes instead, so no lane idles. P * V holds V::kPvRows accumulator rows of up to 4
// vectors in registers while the step's keys stream past, each V row loaded once for all
// of them. Every score, exp and accumulator element goes through the operations
// attention_tile_step_scalar defines, in its order, so either layout gives its bits.
//
// V provides: F (kWidth floats), zero, load (float / f16), load1, store, set1, fmadd(a, b,
// c) = a * b + c rounded once, mul, add, sub, max, exp (the shared polynomial); for rows
// in lanes Mask, key_mask, blend, maskz; for keys in lanes select, reduce_max, sum16; and
// pack_group (16 K rows transposed into kt[d][0..16), rows kt_stride floats apart).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention/attention.h"

namespace ridge::kernels {
namespace {

constexpr int kKeys = kAttentionStepKeys;  // lanes of a step
constexpr int kGroup = 16;                 // lanes per partial sum (attention/attention.h: Sg)

inline int64_t round_up16(int64_t n) { return (n + 15) / 16 * 16; }

// exp of one float through the vector polynomial (lane 0): the scalar step's bits.
template <class V>
inline float exp1(float x) {
  alignas(64) float out[V::kWidth];
  V::store(out, V::exp(V::set1(x)));
  return out[0];
}

// --- P * V, shared by both layouts.

// acc[r][d0 .. d0 + NV * kWidth) = acc * correction[r], then += p(r, l) * v_rows[l][d0 + ...]
// for lanes l in [lane_begin, lane_end) in order, one fma per element per key; p(r, l) is
// at p[r * p_row + l * p_key].
template <class V, int NR, int NV, class T>
void accumulate_rows(const float* p, int64_t p_row, int64_t p_key, const float* correction, const T* const* v_rows,
                     int64_t d0, int lane_begin, int lane_end, float* acc, int64_t d_head) {
  typename V::F a[NR][NV];
  for (int r = 0; r < NR; ++r) {
    const typename V::F c = V::set1(correction[r]);
    for (int j = 0; j < NV; ++j) a[r][j] = V::mul(V::load(acc + r * d_head + j * V::kWidth), c);
  }
  for (int l = lane_begin; l < lane_end; ++l) {
    const T* v = v_rows[l] + d0;
    typename V::F x[NV];
    for (int j = 0; j < NV; ++j) x[j] = V::load(v + j * V::kWidth);
    for (int r = 0; r < NR; ++r) {
      const typename V::F w = V::set1(p[r * p_row + l * p_key]);
      for (int j = 0; j < NV; ++j) a[r][j] = V::fmadd(w, x[j], a[r][j]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int j = 0; j < NV; ++j) V::store(acc + r * d_head + j * V::kWidth, a[r][j]);
}

template <class V, int NR, class T>
void accumulate_rows_nv(int nv, const float* p, int64_t p_row, int64_t p_key, const float* correction,
                        const T* const* v_rows, int64_t d0, int lane_begin, int lane_end, float* acc, int64_t d_head) {
  switch (nv) {
    case 4: return accumulate_rows<V, NR, 4>(p, p_row, p_key, correction, v_rows, d0, lane_begin, lane_end, acc, d_head);
    case 3: return accumulate_rows<V, NR, 3>(p, p_row, p_key, correction, v_rows, d0, lane_begin, lane_end, acc, d_head);
    case 2: return accumulate_rows<V, NR, 2>(p, p_row, p_key, correction, v_rows, d0, lane_begin, lane_end, acc, d_head);
    default: return accumulate_rows<V, NR, 1>(p, p_row, p_key, correction, v_rows, d0, lane_begin, lane_end, acc, d_head);
  }
}

template <class V, int NR, class T>
void accumulate_rows_upto(int nr, int nv, const float* p, int64_t p_row, int64_t p_key, const float* correction,
                          const T* const* v_rows, int64_t d0, int lane_begin, int lane_end, float* acc,
                          int64_t d_head) {
  if constexpr (NR > 1) {
    if (nr < NR)
      return accumulate_rows_upto<V, NR - 1>(nr, nv, p, p_row, p_key, correction, v_rows, d0, lane_begin, lane_end,
                                             acc, d_head);
  }
  accumulate_rows_nv<V, NR>(nv, p, p_row, p_key, correction, v_rows, d0, lane_begin, lane_end, acc, d_head);
}

// P * V for all rows, each row's rescale folded into the load of its accumulators:
// kPvRows rows by up to 4 vectors of output at a time; the tail of d_head one element at
// a time, in the same order.
template <class V, class T>
void accumulate_all(int64_t n_rows, const float* p, int64_t p_row, int64_t p_key, const float* correction,
                    const T* const* v_rows, int lane_begin, int lane_end, float* acc, int64_t d_head) {
  const int64_t d_vec = d_head / V::kWidth * V::kWidth;
  for (int64_t d0 = 0; d0 < d_vec; d0 += 4 * V::kWidth) {
    const int nv = static_cast<int>(std::min<int64_t>(4, (d_vec - d0) / V::kWidth));
    for (int64_t r0 = 0; r0 < n_rows; r0 += V::kPvRows) {
      const int nr = static_cast<int>(std::min<int64_t>(V::kPvRows, n_rows - r0));
      accumulate_rows_upto<V, V::kPvRows>(nr, nv, p + r0 * p_row, p_row, p_key, correction + r0, v_rows, d0,
                                          lane_begin, lane_end, acc + r0 * d_head + d0, d_head);
    }
  }
  for (int64_t row = 0; row < n_rows && d_vec < d_head; ++row) {
    float* a = acc + row * d_head;
    for (int64_t d = d_vec; d < d_head; ++d) a[d] *= correction[row];
    for (int l = lane_begin; l < lane_end; ++l)
      for (int64_t d = d_vec; d < d_head; ++d) a[d] = std::fma(p[row * p_row + l * p_key], V::load1(v_rows[l] + d), a[d]);
  }
}

// --- Rows in lanes (a tile of tokens).

// Scores of NRV row vectors (kWidth rows each) against keys [l0, l0 + kQkKeys) (kt points
// at l0): s[l][r] = fma chain over d of qt[d][r] * kt[d][l], times scale.
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

// The online softmax of kWidth rows (lanes) over the step's keys, s[l][row] -> p in
// place: new max, correction = e(old max - new max) (exactly 1 when the max did not grow;
// it multiplies zeros while a row is still empty), sum = sum * correction + the sum of p.
// Unmasked (kMasked false) when every row of the tile sees all of [lane_begin, lane_end):
// the rows padding the vector past the tile then take unmasked scores, but nothing reads
// them back.
template <class V, bool kMasked>
void softmax_rows_as(float* s, int64_t s_stride, const int32_t* row_lb, const int32_t* row_le, int lane_begin,
                     int lane_end, float* max, float* sum, float* correction) {
  using F = typename V::F;
  const F minus_inf = V::set1(-INFINITY);
  F block_max = minus_inf;
  for (int l = lane_begin; l < lane_end; ++l) {
    if constexpr (kMasked) {
      const F x = V::blend(V::key_mask(row_lb, row_le, l), V::load(s + l * s_stride), minus_inf);
      V::store(s + l * s_stride, x);
      block_max = V::max(block_max, x);
    } else {
      block_max = V::max(block_max, V::load(s + l * s_stride));
    }
  }
  const F old_max = V::load(max), new_max = V::max(old_max, block_max);
  const F c = V::exp(V::sub(old_max, new_max));
  auto p_at = [&](int l) {
    if (l < lane_begin || l >= lane_end) return V::zero();
    F p = V::exp(V::sub(V::load(s + l * s_stride), new_max));
    if constexpr (kMasked) p = V::maskz(V::key_mask(row_lb, row_le, l), p);
    V::store(s + l * s_stride, p);
    return p;
  };
  F total = V::zero();
  for (int g = 0; g < kKeys / kGroup; ++g) {
    const int base = g * kGroup;
    F group_sum = V::zero();
    if (base < lane_end && base + kGroup > lane_begin) {
      F w[8];
      for (int i = 0; i < 8; ++i) w[i] = V::add(p_at(base + i), p_at(base + i + 8));
      const F x0 = V::add(w[0], w[4]), x1 = V::add(w[1], w[5]), x2 = V::add(w[2], w[6]), x3 = V::add(w[3], w[7]);
      group_sum = V::add(V::add(x0, x2), V::add(x1, x3));
    }
    total = g == 0 ? group_sum : V::add(total, group_sum);
  }
  V::store(sum, V::add(V::mul(V::load(sum), c), total));
  V::store(max, new_max);
  V::store(correction, c);
}

// The first n_real of the kWidth rows are the tile's (the others pad the vector).
template <class V>
void softmax_rows(float* s, int64_t s_stride, const int32_t* row_lb, const int32_t* row_le, int lane_begin,
                  int lane_end, int64_t n_real, float* max, float* sum, float* correction) {
  bool all_see = true;
  for (int64_t i = 0; i < std::min<int64_t>(n_real, V::kWidth) && all_see; ++i)
    all_see = row_lb[i] <= lane_begin && row_le[i] >= lane_end;
  if (all_see)
    softmax_rows_as<V, false>(s, s_stride, row_lb, row_le, lane_begin, lane_end, max, sum, correction);
  else
    softmax_rows_as<V, true>(s, s_stride, row_lb, row_le, lane_begin, lane_end, max, sum, correction);
}

// Rows in lanes, once the scores s[l][row] (rows_pad apart) are in: the rows' lane
// ranges and states into `stats` (5 x rows_pad floats), softcap, the online softmax and
// P * V over the float V rows, and the states back.
template <class V, class T>
void finish_rows_in_lanes(const AttentionTileStep<T>& st, float* s, float* stats, const float* const* v_rows) {
  const int64_t n_rows = st.n_tokens * st.n_heads, d_head = st.d_head, rows_pad = round_up16(n_rows);
  float* max = stats;                   // [rows_pad]
  float* sum = max + rows_pad;          // [rows_pad]
  float* correction = sum + rows_pad;   // [rows_pad]
  auto* row_lb = reinterpret_cast<int32_t*>(correction + rows_pad);  // [rows_pad] the lanes a row sees
  int32_t* row_le = row_lb + rows_pad;                                // [rows_pad]
  for (int64_t i = 0; i < st.n_tokens; ++i) {
    std::fill(row_lb + i * st.n_heads, row_lb + (i + 1) * st.n_heads, st.token_lane_begin[i]);
    std::fill(row_le + i * st.n_heads, row_le + (i + 1) * st.n_heads, st.token_lane_end[i]);
  }
  std::fill(row_lb + n_rows, row_lb + rows_pad, 0);
  std::fill(row_le + n_rows, row_le + rows_pad, 0);
  std::copy(st.max, st.max + n_rows, max);
  std::fill(max + n_rows, max + rows_pad, -INFINITY);
  std::copy(st.sum, st.sum + n_rows, sum);
  std::fill(sum + n_rows, sum + rows_pad, 0.0f);
  if (st.softcap > 0)
    for (int64_t row = 0; row < n_rows; ++row)
      for (int l = row_lb[row]; l < row_le[row]; ++l)
        s[l * rows_pad + row] = std::tanh(s[l * rows_pad + row] / st.softcap) * st.softcap;
  for (int64_t r0 = 0; r0 < n_rows; r0 += V::kWidth)  // vectors past the rows: nothing reads them
    softmax_rows<V>(s + r0, rows_pad, row_lb + r0, row_le + r0, st.lane_begin, st.lane_end, n_rows - r0, max + r0,
                    sum + r0, correction + r0);

  accumulate_all<V>(n_rows, s, 1, rows_pad, correction, v_rows, st.lane_begin, st.lane_end, st.acc, d_head);
  std::copy(max, max + n_rows, st.max);
  std::copy(sum, sum + n_rows, st.sum);
}

// f(v0, nrv) over row vectors [v0, v0 + nrv) in groups of up to `most` for a score block
// (the last groups evened out, so none is left with a single vector to amortize each
// broadcast over).
template <class F>
void for_row_groups(int64_t n_vecs, int most, F&& f) {
  for (int64_t v0 = 0; v0 < n_vecs;) {
    int64_t nrv = std::min<int64_t>(most, n_vecs - v0);
    if (nrv == most && n_vecs - v0 == most + 1 && most > 2) nrv = 2;
    f(v0, static_cast<int>(nrv));
    v0 += nrv;
  }
}

// Work shared by both layouts: K^T [d_pad][kKeys], then the layout's own.
template <class V, class T>
void step_rows_in_lanes(const AttentionTileStep<T>& st, const T* const* v_rows_in) {
  const int64_t n_rows = st.n_tokens * st.n_heads, d_head = st.d_head;
  const int64_t rows_pad = round_up16(n_rows), d_pad = round_up16(d_head);
  float* kt = st.work;                         // [d_pad][kKeys] K^T
  float* vf = kt + d_pad * kKeys;              // [kKeys][d_head] V rows as floats
  float* s = vf + kKeys * d_head;              // [kKeys][rows_pad] scores, then p
  float* stats = s + kKeys * rows_pad;         // [5][rows_pad]

  // V rows widened once for all the rows' accumulators.
  const float* v_rows[kKeys];
  const int64_t d_vec = d_head / V::kWidth * V::kWidth;
  for (int l = st.lane_begin; l < st.lane_end; ++l) {
    float* dst = vf + l * d_head;
    const T* src = v_rows_in[l];
    int64_t d = 0;
    for (; d < d_vec; d += V::kWidth) V::store(dst + d, V::load(src + d));
    for (; d < d_head; ++d) dst[d] = V::load1(src + d);
    v_rows[l] = dst;
  }

  // Scores s[l][row], kQkRowVecs row vectors by kQkKeys keys at a time.
  for_row_groups(rows_pad / V::kWidth, V::kQkRowVecs, [&](int64_t v0, int nrv) {
    const int64_t r0 = v0 * V::kWidth;
    for (int l0 = st.lane_begin / V::kQkKeys * V::kQkKeys; l0 < st.lane_end; l0 += V::kQkKeys)
      score_block_upto<V, V::kQkRowVecs>(nrv, st.qt + r0, st.qt_stride, kt + l0, d_head, st.scale,
                                         s + l0 * rows_pad + r0, rows_pad);
  });
  finish_rows_in_lanes<V>(st, s, stats, v_rows);
}

// --- Keys in lanes (few rows: decode).

// Scores of NR rows against one group of 16 keys, kt = its K^T [d][16]: p[r][lane] = fma
// chain over d of qt[d][r] * kt[d][lane], times scale.
template <class V, int NR>
void score_rows(const float* qt, int64_t qt_stride, const float* kt, int64_t d_head, float scale, float* p,
                int64_t p_row) {
  constexpr int64_t kt_stride = kGroup;  // a group packed on its own
  constexpr int kV = kGroup / V::kWidth;
  typename V::F acc[NR][kV];
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < kV; ++i) acc[r][i] = V::zero();
  for (int64_t d = 0; d < d_head; ++d) {
    typename V::F k[kV];
    for (int i = 0; i < kV; ++i) k[i] = V::load(kt + d * kt_stride + i * V::kWidth);
    for (int r = 0; r < NR; ++r) {
      const typename V::F q = V::set1(qt[d * qt_stride + r]);
      for (int i = 0; i < kV; ++i) acc[r][i] = V::fmadd(q, k[i], acc[r][i]);
    }
  }
  const typename V::F sc = V::set1(scale);
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < kV; ++i) V::store(p + r * p_row + i * V::kWidth, V::mul(acc[r][i], sc));
}

template <class V, int NR>
void score_rows_upto(int nr, const float* qt, int64_t qt_stride, const float* kt, int64_t d_head, float scale,
                     float* p, int64_t p_row) {
  if constexpr (NR > 1) {
    if (nr < NR) return score_rows_upto<V, NR - 1>(nr, qt, qt_stride, kt, d_head, scale, p, p_row);
  }
  score_rows<V, NR>(qt, qt_stride, kt, d_head, scale, p, p_row);
}

// Keys in lanes, once the scores p[row][l] of the step's groups of 16 keys are in: softcap,
// the online softmax per row (correction: n_rows floats) and P * V over the V rows.
template <class V, class T, class TV>
void finish_keys_in_lanes(const AttentionTileStep<T>& st, float* p, float* correction, const TV* const* v_rows) {
  constexpr int kVecs = kKeys / V::kWidth, kGroupVecs = kGroup / V::kWidth;
  const int64_t n_rows = st.n_tokens * st.n_heads, d_head = st.d_head;
  const int g_begin = st.lane_begin / kGroup, g_end = (st.lane_end + kGroup - 1) / kGroup;
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
    typename V::F x[kVecs];
    const int v_begin = g_begin * kGroupVecs, v_end = g_end * kGroupVecs;
    for (int i = v_begin; i < v_end; ++i) x[i] = V::select(lb, le, i, V::load(pr + i * V::kWidth), V::set1(-INFINITY));
    float block_max = -INFINITY;
    for (int i = v_begin; i < v_end; ++i) block_max = std::max(block_max, V::reduce_max(x[i]));
    const float old_max = st.max[row], new_max = std::max(old_max, block_max);
    if (new_max > old_max) {
      if (old_max != -INFINITY) {  // else the row is empty: nothing to rescale
        correction[row] = exp1<V>(old_max - new_max);
        st.sum[row] *= correction[row];
      }
      st.max[row] = new_max;
    }
    const typename V::F m = V::set1(new_max);
    float total = 0.0f;
    for (int g = 0; g < kKeys / kGroup; ++g) {
      float group_sum = 0.0f;
      if (g >= g_begin && g < g_end) {
        for (int i = g * kGroupVecs; i < (g + 1) * kGroupVecs; ++i) {
          x[i] = V::select(lb, le, i, V::exp(V::sub(x[i], m)), V::zero());
          V::store(pr + i * V::kWidth, x[i]);
        }
        group_sum = V::sum16(x + g * kGroupVecs);
      }
      total = g == 0 ? group_sum : total + group_sum;
    }
    st.sum[row] += total;
  }
  // P * V a group of 16 keys at a time, so the V rows a pass over d reads stay in L1; the
  // rescale goes with the first group (then times 1, which changes no bits).
  for (int g = g_begin; g < g_end; ++g) {
    accumulate_all<V>(n_rows, p, kKeys, 1, correction, v_rows, std::max(st.lane_begin, g * kGroup),
                      std::min(st.lane_end, (g + 1) * kGroup), st.acc, d_head);
    std::fill(correction, correction + n_rows, 1.0f);
  }
}

template <class V, class T>
void step_keys_in_lanes(const AttentionTileStep<T>& st, const T* const* k_rows, const T* const* v_rows) {
  const int64_t n_rows = st.n_tokens * st.n_heads, d_head = st.d_head;
  float* kt = st.work;                              // [d_pad][kKeys] K^T
  float* p = kt + round_up16(d_head) * kKeys;       // [n_rows][kKeys] scores, then p
  float* correction = p + n_rows * kKeys;           // [n_rows]
  const int g_begin = st.lane_begin / kGroup, g_end = (st.lane_end + kGroup - 1) / kGroup;
  // K^T one group of 16 keys at a time, packed densely ([d][16], 16 KB at d_head 256) and
  // scored while it is in L1: a [d][64] layout's 256-byte stride would crowd a quarter of
  // the L1 sets.
  for (int g = g_begin; g < g_end; ++g) {
    V::pack_group(k_rows + g * kGroup, d_head, kt, kGroup);
    for (int64_t r0 = 0; r0 < n_rows; r0 += V::kScoreRows) {
      const int nr = static_cast<int>(std::min<int64_t>(V::kScoreRows, n_rows - r0));
      score_rows_upto<V, V::kScoreRows>(nr, st.qt + r0, st.qt_stride, kt, d_head, st.scale,
                                        p + r0 * kKeys + g * kGroup, kKeys);
    }
  }
  finish_keys_in_lanes<V>(st, p, correction, v_rows);
}

// The two layouts give the same bits (both are the scalar step's arithmetic); the choice
// only follows the number of rows. Null rows (keys of blocks no row sees) read as zeros.
template <class V, class T>
void tile_step(const AttentionTileStep<T>& st) {
  const int64_t n_rows = st.n_tokens * st.n_heads;
  // The zero row sits at the end of the work space (attention_tile_work_floats).
  const int64_t rows_pad = round_up16(n_rows);
  float* zeros = st.work + (round_up16(st.d_head) + st.d_head + rows_pad) * kKeys + 5 * rows_pad;
  std::fill(zeros, zeros + st.d_head, 0.0f);
  const T* zero_row = reinterpret_cast<const T*>(zeros);
  const T* k_rows[kKeys];
  const T* v_rows[kKeys];
  for (int l = 0; l < kKeys; ++l) {
    const bool in = l >= st.lane_begin && l < st.lane_end;
    k_rows[l] = in && st.k_rows[l] ? st.k_rows[l] : zero_row;
    v_rows[l] = in && st.v_rows[l] ? st.v_rows[l] : zero_row;
  }
  if (n_rows <= 8) {
    step_keys_in_lanes<V>(st, k_rows, v_rows);
  } else {
    for (int g = st.lane_begin / kGroup; g * kGroup < st.lane_end; ++g)
      V::pack_group(k_rows + g * kGroup, st.d_head, st.work + g * kGroup, kKeys);
    step_rows_in_lanes<V>(st, v_rows);
  }
}

}  // namespace
}  // namespace ridge::kernels
