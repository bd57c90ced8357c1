// AVX2+FMA paths of kernels/recurrent/ (on kAvx2 and kAvxVnni): avx512.cpp's loops on 8
// lanes, the same two passes over each state row per token (decay and the dot with k while
// storing it back; the update and the dot with q or C), rows carried through a block of
// tokens while they sit in L1. Tails go through masked loads and stores.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/recurrent/paths.h"

#pragma GCC target("avx2,fma")

#include "kernels/avx2_math.h"

namespace ridge::kernels::recurrent {

namespace {

// Tokens whose decays are taken at once, before the rows are walked through them.
constexpr int64_t kTokenBlock = 32;

// Lanes [0, n) of 8 (n in [0, 8]).
inline __m256i lanes_below(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

}  // namespace

void gated_delta_rule_heads_avx2(const DeltaNetArgs& a, int64_t h_begin, int64_t h_end) {
  const DeltaNetShape& s = a.shape;
  const int64_t d_k = s.d_k, head_size = s.d_v * s.d_k;
  const int64_t n_full = d_k & ~int64_t{7};
  const bool has_tail = n_full < d_k;
  const __m256i tail = lanes_below(d_k - n_full);
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
          const __m256 dec = _mm256_set1_ps(decay[tt]);
          __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
          int64_t i = 0;
          for (; i + 16 <= n_full; i += 16) {
            const __m256 r0 = _mm256_mul_ps(_mm256_loadu_ps(row + i), dec);
            const __m256 r1 = _mm256_mul_ps(_mm256_loadu_ps(row + i + 8), dec);
            _mm256_storeu_ps(row + i, r0);
            _mm256_storeu_ps(row + i + 8, r1);
            acc0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(k + i), acc0);
            acc1 = _mm256_fmadd_ps(r1, _mm256_loadu_ps(k + i + 8), acc1);
          }
          for (; i < n_full; i += 8) {
            const __m256 r = _mm256_mul_ps(_mm256_loadu_ps(row + i), dec);
            _mm256_storeu_ps(row + i, r);
            acc0 = _mm256_fmadd_ps(r, _mm256_loadu_ps(k + i), acc0);
          }
          if (has_tail) {
            const __m256 r = _mm256_mul_ps(_mm256_maskload_ps(row + i, tail), dec);
            _mm256_maskstore_ps(row + i, tail, r);
            acc1 = _mm256_fmadd_ps(r, _mm256_maskload_ps(k + i, tail), acc1);
          }
          const float sk = hsum(_mm256_add_ps(acc0, acc1));
          // Pass 2: row += k u, stored (and copied to states_after); o = row . q.
          const __m256 u = _mm256_set1_ps(beta[tt] * (a.v[t * a.v_stride + h * s.d_v + j] - sk));
          float* after = a.states_after != nullptr ? a.states_after + (t * s.n_heads + h) * head_size + j * d_k : nullptr;
          acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
          for (i = 0; i + 16 <= n_full; i += 16) {
            const __m256 r0 = _mm256_fmadd_ps(_mm256_loadu_ps(k + i), u, _mm256_loadu_ps(row + i));
            const __m256 r1 = _mm256_fmadd_ps(_mm256_loadu_ps(k + i + 8), u, _mm256_loadu_ps(row + i + 8));
            _mm256_storeu_ps(row + i, r0);
            _mm256_storeu_ps(row + i + 8, r1);
            if (after != nullptr) _mm256_storeu_ps(after + i, r0), _mm256_storeu_ps(after + i + 8, r1);
            acc0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q + i), acc0);
            acc1 = _mm256_fmadd_ps(r1, _mm256_loadu_ps(q + i + 8), acc1);
          }
          for (; i < n_full; i += 8) {
            const __m256 r = _mm256_fmadd_ps(_mm256_loadu_ps(k + i), u, _mm256_loadu_ps(row + i));
            _mm256_storeu_ps(row + i, r);
            if (after != nullptr) _mm256_storeu_ps(after + i, r);
            acc0 = _mm256_fmadd_ps(r, _mm256_loadu_ps(q + i), acc0);
          }
          if (has_tail) {
            const __m256 r = _mm256_fmadd_ps(_mm256_maskload_ps(k + i, tail), u, _mm256_maskload_ps(row + i, tail));
            _mm256_maskstore_ps(row + i, tail, r);
            if (after != nullptr) _mm256_maskstore_ps(after + i, tail, r);
            acc1 = _mm256_fmadd_ps(r, _mm256_maskload_ps(q + i, tail), acc1);
          }
          a.out[t * s.n_heads * s.d_v + h * s.d_v + j] = hsum(_mm256_add_ps(acc0, acc1)) * s.q_scale;
        }
      }
    }
  }
}

void ssm_scan_heads_avx2(const SsmArgs& a, int64_t h_begin, int64_t h_end) {
  const SsmShape& s = a.shape;
  const int64_t d_state = s.d_state, head_size = s.head_dim * s.d_state;
  const int64_t heads_per_group = s.n_heads / s.n_groups;
  const int64_t n_full = d_state & ~int64_t{7};
  const bool has_tail = n_full < d_state;
  const __m256i tail = lanes_below(d_state - n_full);
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
          const __m256 decay = _mm256_set1_ps(dA[tt]);
          const __m256 x_dt = _mm256_set1_ps(a.x[t * a.x_stride + h * s.head_dim + p] * delta[tt]);
          float* after = a.states_after != nullptr ? a.states_after + (t * s.n_heads + h) * head_size + p * d_state : nullptr;
          __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
          int64_t i = 0;
          for (; i + 16 <= n_full; i += 16) {
            const __m256 r0 = _mm256_fmadd_ps(_mm256_loadu_ps(B + i), x_dt, _mm256_mul_ps(_mm256_loadu_ps(row + i), decay));
            const __m256 r1 =
                _mm256_fmadd_ps(_mm256_loadu_ps(B + i + 8), x_dt, _mm256_mul_ps(_mm256_loadu_ps(row + i + 8), decay));
            _mm256_storeu_ps(row + i, r0);
            _mm256_storeu_ps(row + i + 8, r1);
            if (after != nullptr) _mm256_storeu_ps(after + i, r0), _mm256_storeu_ps(after + i + 8, r1);
            acc0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(C + i), acc0);
            acc1 = _mm256_fmadd_ps(r1, _mm256_loadu_ps(C + i + 8), acc1);
          }
          for (; i < n_full; i += 8) {
            const __m256 r = _mm256_fmadd_ps(_mm256_loadu_ps(B + i), x_dt, _mm256_mul_ps(_mm256_loadu_ps(row + i), decay));
            _mm256_storeu_ps(row + i, r);
            if (after != nullptr) _mm256_storeu_ps(after + i, r);
            acc0 = _mm256_fmadd_ps(r, _mm256_loadu_ps(C + i), acc0);
          }
          if (has_tail) {
            const __m256 r = _mm256_fmadd_ps(_mm256_maskload_ps(B + i, tail), x_dt,
                                             _mm256_mul_ps(_mm256_maskload_ps(row + i, tail), decay));
            _mm256_maskstore_ps(row + i, tail, r);
            if (after != nullptr) _mm256_maskstore_ps(after + i, tail, r);
            acc1 = _mm256_fmadd_ps(r, _mm256_maskload_ps(C + i, tail), acc1);
          }
          a.y[t * s.n_heads * s.head_dim + h * s.head_dim + p] = hsum(_mm256_add_ps(acc0, acc1));
        }
      }
    }
  }
}

void causal_conv1d_avx2(float* state, const float* x, int64_t x_stride, const float* w, const float* bias,
                        float* y, int64_t n_tokens, int64_t channels, int d_conv, bool silu) {
  if (n_tokens == 0) return;
  const int64_t n_state = d_conv - 1;
  // Row r of [state, x_0 .. x_{n_tokens-1}].
  auto input = [&](int64_t r) { return r < n_state ? state + r * channels : x + (r - n_state) * x_stride; };
  // Lane l of a block reads channel c + l's taps, d_conv floats apart.
  const __m256i tap_index = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(d_conv));
  for (int64_t c = 0; c < channels; c += 8) {
    const __m256i m = lanes_below(std::min<int64_t>(8, channels - c));
    // y = bias + sum_k window[k] * w[.][k], tap by tap over all the tokens (see avx512.cpp).
    const __m256 b = bias != nullptr ? _mm256_maskload_ps(bias + c, m) : _mm256_setzero_ps();
    for (int k = 0; k < d_conv; ++k) {
      const __m256 tap =
          _mm256_mask_i32gather_ps(_mm256_setzero_ps(), w + c * d_conv + k, tap_index, _mm256_castsi256_ps(m), 4);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const __m256 sum = k == 0 ? b : _mm256_maskload_ps(y + t * channels + c, m);
        _mm256_maskstore_ps(y + t * channels + c, m, _mm256_fmadd_ps(_mm256_maskload_ps(input(t + k) + c, m), tap, sum));
      }
    }
    if (silu)
      for (int64_t t = 0; t < n_tokens; ++t) {
        const __m256 v = _mm256_maskload_ps(y + t * channels + c, m);
        const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), v));
        _mm256_maskstore_ps(y + t * channels + c, m, _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
      }
    // The new state: row r from row n_tokens + r, never before it (see reference.cpp).
    for (int64_t r = 0; r < n_state; ++r)
      _mm256_maskstore_ps(state + r * channels + c, m, _mm256_maskload_ps(input(n_tokens + r) + c, m));
  }
}

}  // namespace ridge::kernels::recurrent
