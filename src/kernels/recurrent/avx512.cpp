// AVX-512 paths of kernels/recurrent/ (on kAvx512Vnni and kAmxInt8), 16 lanes over the
// contiguous index of each state row: the key index of the delta state, d_state of the ssm
// state, the channels of the conv state. Each state row is carried through a block of tokens
// while it sits in L1, and per token it is read from memory once and written once: the first
// pass decays it and takes its dot with k (the delta rule) while storing it back, the second
// adds the update and takes its dot with q (or C). avx2.cpp is this on 8 lanes.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/recurrent/paths.h"

#pragma GCC target("avx2,fma,avx512f,avx512dq")
// GCC 12 warns that the intrinsics' _mm512_undefined_*() pass-throughs are uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/avx512_math.h"

namespace ridge::kernels::recurrent {

namespace {

// Tokens whose decays are taken at once, before the rows are walked through them.
constexpr int64_t kTokenBlock = 32;

inline __mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>((1u << (n & 15)) - 1); }

}  // namespace

void gated_delta_rule_heads_avx512(const DeltaNetArgs& a, int64_t h_begin, int64_t h_end) {
  const DeltaNetShape& s = a.shape;
  const int64_t d_k = s.d_k, head_size = s.d_v * s.d_k;
  const int64_t n_full = d_k & ~int64_t{15};
  const __mmask16 tail = tail_mask(d_k);
  float decay[kTokenBlock], beta[kTokenBlock];
  for (int64_t h = h_begin; h < h_end; ++h) {
    const int64_t hk = h % s.n_k_heads;
    float* S = a.state + h * head_size;
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kTokenBlock) {
      const int64_t nt = std::min(kTokenBlock, a.n_tokens - t0);
      for (int64_t tt = 0; tt < nt; ++tt) {
        decay[tt] = std::exp(a.g[(t0 + tt) * s.n_heads + h]);
        beta[tt] = a.beta[(t0 + tt) * s.n_heads + h];
      }
      for (int64_t j = 0; j < s.d_v; ++j) {
        float* row = S + j * d_k;  // S[.][j] over the key index
        for (int64_t tt = 0; tt < nt; ++tt) {
          const int64_t t = t0 + tt;
          const float* q = a.q + t * a.qk_stride + hk * d_k;
          const float* k = a.k + t * a.qk_stride + hk * d_k;
          // Pass 1: row *= decay, stored back; sk = row . k.
          const __m512 dec = _mm512_set1_ps(decay[tt]);
          __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
          int64_t i = 0;
          for (; i + 32 <= n_full; i += 32) {
            const __m512 r0 = _mm512_mul_ps(_mm512_loadu_ps(row + i), dec);
            const __m512 r1 = _mm512_mul_ps(_mm512_loadu_ps(row + i + 16), dec);
            _mm512_storeu_ps(row + i, r0);
            _mm512_storeu_ps(row + i + 16, r1);
            acc0 = _mm512_fmadd_ps(r0, _mm512_loadu_ps(k + i), acc0);
            acc1 = _mm512_fmadd_ps(r1, _mm512_loadu_ps(k + i + 16), acc1);
          }
          for (; i < n_full; i += 16) {
            const __m512 r = _mm512_mul_ps(_mm512_loadu_ps(row + i), dec);
            _mm512_storeu_ps(row + i, r);
            acc0 = _mm512_fmadd_ps(r, _mm512_loadu_ps(k + i), acc0);
          }
          if (tail) {
            const __m512 r = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row + i), dec);
            _mm512_mask_storeu_ps(row + i, tail, r);
            acc1 = _mm512_fmadd_ps(r, _mm512_maskz_loadu_ps(tail, k + i), acc1);
          }
          const float sk = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
          // Pass 2: row += k u, stored (and copied to states_after); o = row . q.
          const __m512 u = _mm512_set1_ps(beta[tt] * (a.v[t * a.v_stride + h * s.d_v + j] - sk));
          float* after = a.states_after != nullptr ? a.states_after + (t * s.n_heads + h) * head_size + j * d_k : nullptr;
          acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
          for (i = 0; i + 32 <= n_full; i += 32) {
            const __m512 r0 = _mm512_fmadd_ps(_mm512_loadu_ps(k + i), u, _mm512_loadu_ps(row + i));
            const __m512 r1 = _mm512_fmadd_ps(_mm512_loadu_ps(k + i + 16), u, _mm512_loadu_ps(row + i + 16));
            _mm512_storeu_ps(row + i, r0);
            _mm512_storeu_ps(row + i + 16, r1);
            if (after != nullptr) _mm512_storeu_ps(after + i, r0), _mm512_storeu_ps(after + i + 16, r1);
            acc0 = _mm512_fmadd_ps(r0, _mm512_loadu_ps(q + i), acc0);
            acc1 = _mm512_fmadd_ps(r1, _mm512_loadu_ps(q + i + 16), acc1);
          }
          for (; i < n_full; i += 16) {
            const __m512 r = _mm512_fmadd_ps(_mm512_loadu_ps(k + i), u, _mm512_loadu_ps(row + i));
            _mm512_storeu_ps(row + i, r);
            if (after != nullptr) _mm512_storeu_ps(after + i, r);
            acc0 = _mm512_fmadd_ps(r, _mm512_loadu_ps(q + i), acc0);
          }
          if (tail) {
            const __m512 r = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, k + i), u, _mm512_maskz_loadu_ps(tail, row + i));
            _mm512_mask_storeu_ps(row + i, tail, r);
            if (after != nullptr) _mm512_mask_storeu_ps(after + i, tail, r);
            acc1 = _mm512_fmadd_ps(r, _mm512_maskz_loadu_ps(tail, q + i), acc1);
          }
          a.out[t * s.n_heads * s.d_v + h * s.d_v + j] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) * s.q_scale;
        }
      }
    }
  }
}

void ssm_scan_heads_avx512(const SsmArgs& a, int64_t h_begin, int64_t h_end) {
  const SsmShape& s = a.shape;
  const int64_t d_state = s.d_state, head_size = s.head_dim * s.d_state;
  const int64_t heads_per_group = s.n_heads / s.n_groups;
  const int64_t n_full = d_state & ~int64_t{15};
  const __mmask16 tail = tail_mask(d_state);
  float delta[kTokenBlock], dA[kTokenBlock];
  for (int64_t h = h_begin; h < h_end; ++h) {
    const int64_t gr = h / heads_per_group;
    float* state = a.state + h * head_size;
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kTokenBlock) {
      const int64_t nt = std::min(kTokenBlock, a.n_tokens - t0);
      for (int64_t tt = 0; tt < nt; ++tt) {
        delta[tt] = softplus(a.dt[(t0 + tt) * a.dt_stride + h]);
        dA[tt] = std::exp(delta[tt] * a.A[h]);
      }
      for (int64_t p = 0; p < s.head_dim; ++p) {
        float* row = state + p * d_state;
        for (int64_t tt = 0; tt < nt; ++tt) {
          const int64_t t = t0 + tt;
          const float* B = a.B + t * a.bc_stride + gr * d_state;
          const float* C = a.C + t * a.bc_stride + gr * d_state;
          const __m512 decay = _mm512_set1_ps(dA[tt]);
          const __m512 x_dt = _mm512_set1_ps(a.x[t * a.x_stride + h * s.head_dim + p] * delta[tt]);
          float* after = a.states_after != nullptr ? a.states_after + (t * s.n_heads + h) * head_size + p * d_state : nullptr;
          __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
          int64_t i = 0;
          for (; i + 32 <= n_full; i += 32) {
            const __m512 r0 = _mm512_fmadd_ps(_mm512_loadu_ps(B + i), x_dt, _mm512_mul_ps(_mm512_loadu_ps(row + i), decay));
            const __m512 r1 =
                _mm512_fmadd_ps(_mm512_loadu_ps(B + i + 16), x_dt, _mm512_mul_ps(_mm512_loadu_ps(row + i + 16), decay));
            _mm512_storeu_ps(row + i, r0);
            _mm512_storeu_ps(row + i + 16, r1);
            if (after != nullptr) _mm512_storeu_ps(after + i, r0), _mm512_storeu_ps(after + i + 16, r1);
            acc0 = _mm512_fmadd_ps(r0, _mm512_loadu_ps(C + i), acc0);
            acc1 = _mm512_fmadd_ps(r1, _mm512_loadu_ps(C + i + 16), acc1);
          }
          for (; i < n_full; i += 16) {
            const __m512 r = _mm512_fmadd_ps(_mm512_loadu_ps(B + i), x_dt, _mm512_mul_ps(_mm512_loadu_ps(row + i), decay));
            _mm512_storeu_ps(row + i, r);
            if (after != nullptr) _mm512_storeu_ps(after + i, r);
            acc0 = _mm512_fmadd_ps(r, _mm512_loadu_ps(C + i), acc0);
          }
          if (tail) {
            const __m512 r = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, B + i), x_dt,
                                             _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row + i), decay));
            _mm512_mask_storeu_ps(row + i, tail, r);
            if (after != nullptr) _mm512_mask_storeu_ps(after + i, tail, r);
            acc1 = _mm512_fmadd_ps(r, _mm512_maskz_loadu_ps(tail, C + i), acc1);
          }
          a.y[t * s.n_heads * s.head_dim + h * s.head_dim + p] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
        }
      }
    }
  }
}

void causal_conv1d_avx512(float* state, const float* x, int64_t x_stride, const float* w, const float* bias,
                          float* y, int64_t n_tokens, int64_t channels, int d_conv, bool silu) {
  if (n_tokens == 0) return;
  const int64_t n_state = d_conv - 1;
  // Row r of [state, x_0 .. x_{n_tokens-1}].
  auto input = [&](int64_t r) { return r < n_state ? state + r * channels : x + (r - n_state) * x_stride; };
  // Lane l of a block reads channel c + l's taps, d_conv floats apart.
  const __m512i tap_index = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32(d_conv));
  for (int64_t c = 0; c < channels; c += 16) {
    const __mmask16 m = channels - c >= 16 ? __mmask16(0xffff) : tail_mask(channels - c);
    // y = bias + sum_k window[k] * w[.][k], tap by tap over all the tokens (taps in the
    // reference's order), so any d_conv works with one gather per tap.
    const __m512 b = bias != nullptr ? _mm512_maskz_loadu_ps(m, bias + c) : _mm512_setzero_ps();
    for (int k = 0; k < d_conv; ++k) {
      const __m512 tap = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, tap_index, w + c * d_conv + k, 4);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const __m512 sum = k == 0 ? b : _mm512_maskz_loadu_ps(m, y + t * channels + c);
        _mm512_mask_storeu_ps(y + t * channels + c, m, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, input(t + k) + c), tap, sum));
      }
    }
    if (silu)
      for (int64_t t = 0; t < n_tokens; ++t) {
        const __m512 v = _mm512_maskz_loadu_ps(m, y + t * channels + c);
        const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), v));
        _mm512_mask_storeu_ps(y + t * channels + c, m, _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
      }
    // The new state: row r from row n_tokens + r, never before it (see reference.cpp).
    for (int64_t r = 0; r < n_state; ++r)
      _mm512_mask_storeu_ps(state + r * channels + c, m, _mm512_maskz_loadu_ps(m, input(n_tokens + r) + c));
  }
}

}  // namespace ridge::kernels::recurrent
