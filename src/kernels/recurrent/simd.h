// The fast paths of kernels/recurrent/ written once over a SIMD traits type V, included by
// recurrent/avx2.cpp (8 lanes) and recurrent/avx512.cpp (16 lanes) after their target pragma
// and their V. Lanes run over the contiguous index of each state row (the key index of the
// delta state, d_state of the ssm state, the channels of the conv state).
//
// The delta rule and the scan walk V::kRows state rows at a time, so the k and q (B and C)
// vectors are loaded once for all of them and the rows' dependency chains overlap; each row
// group is carried through a block of tokens while it sits in L1. Per token a row is read
// from memory once and written once: the first pass decays it and takes its dot with k while
// storing it back, the second adds the rank-1 update and takes its dot with q. Every row gets
// the same operations in the same order whichever group it falls in and whichever thread runs
// its head, so the pool and the token blocking change no bit.
//
// V provides: F (kWidth floats), M (a lane mask), kRows, zero, set1, load, store,
// maskz_load(m, p), mask_store(p, m, x), mul, fmadd(a, b, c) = a * b + c rounded once, add,
// sub, div, exp (the shared polynomial), hsum (a fixed order), tail(n) (lanes [0, n)), full,
// and gather(p, stride, m) (lane l from p[l * stride]).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/prefetch.h"
#include "kernels/recurrent/paths.h"

namespace ridge::kernels::recurrent {
namespace {

// Tokens whose decays are taken at once, before the rows are walked through them.
constexpr int64_t kTokenBlock = 32;

// A row group is R short streams side by side, which the hardware prefetcher barely starts:
// each group asks for the group this many groups ahead (the next head's rows past the last,
// nothing past the state: a prefetch does not fault) into L1.
constexpr int64_t kPrefetchGroups = 2;

inline void prefetch_group_ahead(const float* rows, int64_t floats) {
  const char* ahead = reinterpret_cast<const char*>(rows + kPrefetchGroups * floats);
  for (int64_t o = 0; o < floats * int64_t{sizeof(float)}; o += 64) prefetch_l1(ahead + o);
}

// One token of the delta rule on R rows of d_k floats (value indices j .. j+R, state row r
// at rows + r * d_k): v, out are those R values, after R rows or null.
template <class V, int R>
inline void delta_rows(float* rows, int64_t d_k, const float* k, const float* q, float decay, float beta,
                       const float* v, float q_scale, float* out, float* after) {
  using F = typename V::F;
  const int64_t n_full = d_k / V::kWidth * V::kWidth;
  const bool has_tail = n_full < d_k;
  const typename V::M tail = V::tail(d_k - n_full);
  const F dec = V::set1(decay);
  F acc[R];
  for (int r = 0; r < R; ++r) acc[r] = V::zero();
  // Pass 1: row *= decay, stored back; acc = row . k.
  int64_t i = 0;
  for (; i < n_full; i += V::kWidth) {
    const F kv = V::load(k + i);
    for (int r = 0; r < R; ++r) {
      const F x = V::mul(V::load(rows + r * d_k + i), dec);
      V::store(rows + r * d_k + i, x);
      acc[r] = V::fmadd(x, kv, acc[r]);
    }
  }
  if (has_tail) {
    const F kv = V::maskz_load(tail, k + i);
    for (int r = 0; r < R; ++r) {
      const F x = V::mul(V::maskz_load(tail, rows + r * d_k + i), dec);
      V::mask_store(rows + r * d_k + i, tail, x);
      acc[r] = V::fmadd(x, kv, acc[r]);
    }
  }
  // u = beta (v - S^T k); pass 2: row += k u, stored (and copied to after); acc = row . q.
  F u[R];
  for (int r = 0; r < R; ++r) {
    u[r] = V::set1(beta * (v[r] - V::hsum(acc[r])));
    acc[r] = V::zero();
  }
  for (i = 0; i < n_full; i += V::kWidth) {
    const F kv = V::load(k + i), qv = V::load(q + i);
    for (int r = 0; r < R; ++r) {
      const F x = V::fmadd(kv, u[r], V::load(rows + r * d_k + i));
      V::store(rows + r * d_k + i, x);
      if (after != nullptr) V::store(after + r * d_k + i, x);
      acc[r] = V::fmadd(x, qv, acc[r]);
    }
  }
  if (has_tail) {
    const F kv = V::maskz_load(tail, k + i), qv = V::maskz_load(tail, q + i);
    for (int r = 0; r < R; ++r) {
      const F x = V::fmadd(kv, u[r], V::maskz_load(tail, rows + r * d_k + i));
      V::mask_store(rows + r * d_k + i, tail, x);
      if (after != nullptr) V::mask_store(after + r * d_k + i, tail, x);
      acc[r] = V::fmadd(x, qv, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = V::hsum(acc[r]) * q_scale;
}

// Rows [j, j + R) of head h through tokens [t0, t0 + nt), decay and beta of token t0 + tt at [tt].
template <class V, int R>
inline void delta_row_group(const DeltaNetArgs& a, int64_t h, int64_t j, int64_t t0, int64_t nt, const float* decay,
                            const float* beta) {
  const DeltaNetShape& s = a.shape;
  const int64_t hk = key_head(s, h), head_size = s.d_v * s.d_k;
  float* rows = a.state + h * head_size + j * s.d_k;
  prefetch_group_ahead(rows, R * s.d_k);
  for (int64_t tt = 0; tt < nt; ++tt) {
    const int64_t t = t0 + tt;
    float* after = a.states_after != nullptr ? a.states_after + (t * s.n_heads + h) * head_size + j * s.d_k : nullptr;
    delta_rows<V, R>(rows, s.d_k, a.k + t * a.qk_stride + hk * s.d_k, a.q + t * a.qk_stride + hk * s.d_k, decay[tt],
                     beta[tt], a.v + t * a.v_stride + h * s.d_v + j, s.q_scale,
                     a.out + t * s.n_heads * s.d_v + h * s.d_v + j, after);
  }
}

template <class V>
void gated_delta_rule_heads(const DeltaNetArgs& a, int64_t h_begin, int64_t h_end) {
  const DeltaNetShape& s = a.shape;
  float decay[kTokenBlock], beta[kTokenBlock];
  for (int64_t h = h_begin; h < h_end; ++h)
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kTokenBlock) {
      const int64_t nt = std::min(kTokenBlock, a.n_tokens - t0);
      for (int64_t tt = 0; tt < nt; ++tt) {
        decay[tt] = std::exp(a.g[(t0 + tt) * s.n_heads + h]);
        beta[tt] = a.beta[(t0 + tt) * s.n_heads + h];
      }
      int64_t j = 0;
      for (; j + V::kRows <= s.d_v; j += V::kRows) delta_row_group<V, V::kRows>(a, h, j, t0, nt, decay, beta);
      for (; j < s.d_v; ++j) delta_row_group<V, 1>(a, h, j, t0, nt, decay, beta);
    }
}

// One token of the scan on R rows of d_state floats (channels p .. p+R of a head): x, y are
// those R values, after R rows or null.
template <class V, int R>
inline void ssm_rows(float* rows, int64_t d_state, const float* B, const float* C, float dA, float delta,
                     const float* x, float* y, float* after) {
  using F = typename V::F;
  const int64_t n_full = d_state / V::kWidth * V::kWidth;
  const bool has_tail = n_full < d_state;
  const typename V::M tail = V::tail(d_state - n_full);
  const F decay = V::set1(dA);
  F x_dt[R], acc[R];
  for (int r = 0; r < R; ++r) x_dt[r] = V::set1(x[r] * delta), acc[r] = V::zero();
  int64_t i = 0;
  for (; i < n_full; i += V::kWidth) {
    const F bv = V::load(B + i), cv = V::load(C + i);
    for (int r = 0; r < R; ++r) {
      const F hv = V::fmadd(bv, x_dt[r], V::mul(V::load(rows + r * d_state + i), decay));
      V::store(rows + r * d_state + i, hv);
      if (after != nullptr) V::store(after + r * d_state + i, hv);
      acc[r] = V::fmadd(hv, cv, acc[r]);
    }
  }
  if (has_tail) {
    const F bv = V::maskz_load(tail, B + i), cv = V::maskz_load(tail, C + i);
    for (int r = 0; r < R; ++r) {
      const F hv = V::fmadd(bv, x_dt[r], V::mul(V::maskz_load(tail, rows + r * d_state + i), decay));
      V::mask_store(rows + r * d_state + i, tail, hv);
      if (after != nullptr) V::mask_store(after + r * d_state + i, tail, hv);
      acc[r] = V::fmadd(hv, cv, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = V::hsum(acc[r]);
}

// Channels [p, p + R) of head h through tokens [t0, t0 + nt), delta and dA of token t0 + tt at [tt].
template <class V, int R>
inline void ssm_row_group(const SsmArgs& a, int64_t h, int64_t p, int64_t t0, int64_t nt, const float* delta,
                          const float* dA) {
  const SsmShape& s = a.shape;
  const int64_t gr = h / (s.n_heads / s.n_groups), head_size = s.head_dim * s.d_state;
  float* rows = a.state + h * head_size + p * s.d_state;
  prefetch_group_ahead(rows, R * s.d_state);
  for (int64_t tt = 0; tt < nt; ++tt) {
    const int64_t t = t0 + tt;
    float* after = a.states_after != nullptr ? a.states_after + (t * s.n_heads + h) * head_size + p * s.d_state : nullptr;
    ssm_rows<V, R>(rows, s.d_state, a.B + t * a.bc_stride + gr * s.d_state, a.C + t * a.bc_stride + gr * s.d_state,
                   dA[tt], delta[tt], a.x + t * a.x_stride + h * s.head_dim + p,
                   a.y + t * s.n_heads * s.head_dim + h * s.head_dim + p, after);
  }
}

template <class V>
void ssm_scan_heads(const SsmArgs& a, int64_t h_begin, int64_t h_end) {
  const SsmShape& s = a.shape;
  float delta[kTokenBlock], dA[kTokenBlock];
  for (int64_t h = h_begin; h < h_end; ++h)
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kTokenBlock) {
      const int64_t nt = std::min(kTokenBlock, a.n_tokens - t0);
      for (int64_t tt = 0; tt < nt; ++tt) {
        delta[tt] = softplus(a.dt[(t0 + tt) * a.dt_stride + h]);
        dA[tt] = std::exp(delta[tt] * a.A[h]);
      }
      int64_t p = 0;
      for (; p + V::kRows <= s.head_dim; p += V::kRows) ssm_row_group<V, V::kRows>(a, h, p, t0, nt, delta, dA);
      for (; p < s.head_dim; ++p) ssm_row_group<V, 1>(a, h, p, t0, nt, delta, dA);
    }
}

template <class V>
void causal_conv1d(float* state, const float* x, int64_t x_stride, const float* w, const float* bias, float* y,
                   int64_t n_tokens, int64_t channels, int d_conv, bool silu) {
  using F = typename V::F;
  if (n_tokens == 0) return;
  const int64_t n_state = d_conv - 1;
  // Row r of [state, x_0 .. x_{n_tokens-1}].
  auto input = [&](int64_t r) { return r < n_state ? state + r * channels : x + (r - n_state) * x_stride; };
  for (int64_t c = 0; c < channels; c += V::kWidth) {
    const typename V::M m = channels - c >= V::kWidth ? V::full() : V::tail(channels - c);
    // y = bias + sum_k window[k] * w[.][k], tap by tap over all the tokens (in the reference's
    // order), so any d_conv works with one gather of lane l's taps (d_conv floats apart) per tap.
    const F b = bias != nullptr ? V::maskz_load(m, bias + c) : V::zero();
    for (int k = 0; k < d_conv; ++k) {
      const F tap = V::gather(w + c * d_conv + k, d_conv, m);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const F sum = k == 0 ? b : V::maskz_load(m, y + t * channels + c);
        V::mask_store(y + t * channels + c, m, V::fmadd(V::maskz_load(m, input(t + k) + c), tap, sum));
      }
    }
    if (silu)
      for (int64_t t = 0; t < n_tokens; ++t) {
        const F v = V::maskz_load(m, y + t * channels + c);
        V::mask_store(y + t * channels + c, m, V::div(v, V::add(V::set1(1.0f), V::exp(V::sub(V::zero(), v)))));
      }
    // The new state: row r from row n_tokens + r, never before it, so ascending r reads every
    // old row before it is overwritten.
    for (int64_t r = 0; r < n_state; ++r) V::mask_store(state + r * channels + c, m, V::maskz_load(m, input(n_tokens + r) + c));
  }
}

}  // namespace
}  // namespace ridge::kernels::recurrent
