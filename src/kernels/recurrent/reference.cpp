// The scalar references of kernels/recurrent/: the recurrences exactly as recurrent.h writes
// them, token by token in plain loops, float state and double sums over a row. The fast paths
// (avx2.cpp, avx512.cpp) are checked against these, and these against the float64 numpy
// references written from the papers (tests/python/test_recurrent_reference.py).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/recurrent/paths.h"
#include "kernels/recurrent/recurrent.h"

namespace ridge::kernels {

namespace recurrent {

void gated_delta_rule_heads_reference(const DeltaNetArgs& a, int64_t h_begin, int64_t h_end) {
  const DeltaNetShape& s = a.shape;
  const int64_t head_size = s.d_v * s.d_k;
  for (int64_t h = h_begin; h < h_end; ++h) {
    const int64_t hk = key_head(s, h);
    float* S = a.state + h * head_size;  // S[j][i]: value index j, key index i
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const float* q = a.q + t * a.qk_stride + hk * s.d_k;
      const float* k = a.k + t * a.qk_stride + hk * s.d_k;
      const float* v = a.v + t * a.v_stride + h * s.d_v;
      const float decay = std::exp(a.g[t * s.n_heads + h]);
      const float beta = a.beta[t * s.n_heads + h];
      float* out = a.out + t * s.n_heads * s.d_v + h * s.d_v;
      for (int64_t j = 0; j < s.d_v; ++j) {
        float* row = S + j * s.d_k;
        for (int64_t i = 0; i < s.d_k; ++i) row[i] *= decay;
        double sk = 0;
        for (int64_t i = 0; i < s.d_k; ++i) sk += double(row[i]) * k[i];
        const float u = beta * (v[j] - static_cast<float>(sk));
        for (int64_t i = 0; i < s.d_k; ++i) row[i] += k[i] * u;
        double sq = 0;
        for (int64_t i = 0; i < s.d_k; ++i) sq += double(row[i]) * q[i];
        out[j] = static_cast<float>(sq) * s.q_scale;
      }
      if (a.states_after != nullptr) std::copy_n(S, head_size, a.states_after + (t * s.n_heads + h) * head_size);
    }
  }
}

void ssm_scan_heads_reference(const SsmArgs& a, int64_t h_begin, int64_t h_end) {
  const SsmShape& s = a.shape;
  const int64_t head_size = s.head_dim * s.d_state;
  const int64_t heads_per_group = s.n_heads / s.n_groups;
  for (int64_t h = h_begin; h < h_end; ++h) {
    const int64_t gr = h / heads_per_group;
    float* state = a.state + h * head_size;
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const float delta = softplus(a.dt[t * a.dt_stride + h]);
      const float dA = std::exp(delta * a.A[h]);
      const float* x = a.x + t * a.x_stride + h * s.head_dim;
      const float* B = a.B + t * a.bc_stride + gr * s.d_state;
      const float* C = a.C + t * a.bc_stride + gr * s.d_state;
      float* y = a.y + t * s.n_heads * s.head_dim + h * s.head_dim;
      for (int64_t p = 0; p < s.head_dim; ++p) {
        float* row = state + p * s.d_state;
        const float x_dt = x[p] * delta;
        double sum = 0;
        for (int64_t n = 0; n < s.d_state; ++n) {
          row[n] = row[n] * dA + B[n] * x_dt;
          sum += double(row[n]) * C[n];
        }
        y[p] = static_cast<float>(sum);
      }
      if (a.states_after != nullptr) std::copy_n(state, head_size, a.states_after + (t * s.n_heads + h) * head_size);
    }
  }
}

}  // namespace recurrent

void causal_conv1d_reference(float* state, const float* x, int64_t x_stride, const float* w,
                             const float* bias, float* y, int64_t n_tokens, int64_t channels, int d_conv,
                             bool silu) {
  if (n_tokens == 0) return;
  const int64_t n_state = d_conv - 1;
  // Row r of [state, x_0 .. x_{n_tokens-1}].
  auto input = [&](int64_t r) { return r < n_state ? state + r * channels : x + (r - n_state) * x_stride; };
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t c = 0; c < channels; ++c) {
      float sum = bias != nullptr ? bias[c] : 0.0f;
      for (int k = 0; k < d_conv; ++k) sum += input(t + k)[c] * w[c * d_conv + k];
      y[t * channels + c] = silu ? sum / (1.0f + std::exp(-sum)) : sum;
    }
  // The new state is the last n_state rows; row r moves from row n_tokens + r, which is
  // never before it, so ascending r reads every old row before it is overwritten.
  for (int64_t r = 0; r < n_state; ++r) std::copy_n(input(n_tokens + r), channels, state + r * channels);
}

void gated_delta_rule_reference(float* state, const float* q, const float* k, int64_t qk_stride,
                                const float* v, int64_t v_stride, const float* g, const float* beta, float* out,
                                int64_t n_tokens, const DeltaNetShape& shape, float* states_after, ThreadPool* pool) {
  gated_delta_rule_isa(state, q, k, qk_stride, v, v_stride, g, beta, out, n_tokens, shape, states_after, pool,
                       Isa::kScalar);
}

void ssm_scan_reference(float* state, const float* x, int64_t x_stride, const float* dt, int64_t dt_stride,
                        const float* A, const float* B, const float* C, int64_t bc_stride, float* y,
                        int64_t n_tokens, const SsmShape& shape, float* states_after, ThreadPool* pool) {
  ssm_scan_isa(state, x, x_stride, dt, dt_stride, A, B, C, bc_stride, y, n_tokens, shape, states_after, pool,
               Isa::kScalar);
}

}  // namespace ridge::kernels
