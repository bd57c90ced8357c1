// recurrent.h's dispatch: each kernel's path from the ISA (the AVX-512 loops on kAvx512Vnni
// and kAmxInt8, the AVX2 loops on kAvx2 and kAvxVnni, the references on kScalar), the heads
// split over the pool; and the two norms, whose cost beside the projections around them is
// too small for per-ISA paths.
#include "kernels/recurrent/recurrent.h"

#include <cassert>
#include <cmath>

#include "kernels/recurrent/paths.h"

namespace ridge::kernels {

namespace {

// Runs fn(h_begin, h_end) over [0, n_heads), split over the pool's threads when there is one.
template <class Fn>
void over_heads(int64_t n_heads, ThreadPool* pool, Fn&& fn) {
  if (pool == nullptr || pool->n_threads() <= 1 || n_heads <= 1) return fn(int64_t{0}, n_heads);
  pool->parallel_for(n_heads, [&](int64_t begin, int64_t end, int) { fn(begin, end); });
}

inline float silu_one(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

void causal_conv1d(float* state, const float* x, int64_t x_stride, const float* w, const float* bias,
                   float* y, int64_t n_tokens, int64_t channels, int d_conv, bool silu) {
  causal_conv1d_isa(state, x, x_stride, w, bias, y, n_tokens, channels, d_conv, silu, best_isa());
}

void causal_conv1d_isa(float* state, const float* x, int64_t x_stride, const float* w, const float* bias,
                       float* y, int64_t n_tokens, int64_t channels, int d_conv, bool silu, Isa isa) {
  assert(d_conv >= 1 && x_stride >= channels);
  require_isa(isa, "causal_conv1d");
  if (isa_has_avx512(isa))
    return recurrent::causal_conv1d_avx512(state, x, x_stride, w, bias, y, n_tokens, channels, d_conv, silu);
  if (isa_has_avx2(isa))
    return recurrent::causal_conv1d_avx2(state, x, x_stride, w, bias, y, n_tokens, channels, d_conv, silu);
  causal_conv1d_reference(state, x, x_stride, w, bias, y, n_tokens, channels, d_conv, silu);
}

void gated_delta_rule(float* state, const float* q, const float* k, int64_t qk_stride, const float* v,
                      int64_t v_stride, const float* g, const float* beta, float* out, int64_t n_tokens,
                      const DeltaNetShape& shape, float* states_after, ThreadPool* pool) {
  gated_delta_rule_isa(state, q, k, qk_stride, v, v_stride, g, beta, out, n_tokens, shape, states_after, pool,
                       best_isa());
}

void gated_delta_rule_isa(float* state, const float* q, const float* k, int64_t qk_stride, const float* v,
                          int64_t v_stride, const float* g, const float* beta, float* out, int64_t n_tokens,
                          const DeltaNetShape& shape, float* states_after, ThreadPool* pool, Isa isa) {
  assert(shape.n_k_heads > 0 && shape.n_heads % shape.n_k_heads == 0);
  require_isa(isa, "gated_delta_rule");
  const recurrent::DeltaNetArgs args{state, q, k, qk_stride, v, v_stride, g, beta, out, n_tokens, shape, states_after};
  auto* heads = isa_has_avx512(isa) ? &recurrent::gated_delta_rule_heads_avx512
                : isa_has_avx2(isa) ? &recurrent::gated_delta_rule_heads_avx2
                                    : &recurrent::gated_delta_rule_heads_reference;
  over_heads(shape.n_heads, pool, [&](int64_t begin, int64_t end) { heads(args, begin, end); });
}

void ssm_scan(float* state, const float* x, int64_t x_stride, const float* dt, int64_t dt_stride,
              const float* A, const float* B, const float* C, int64_t bc_stride, float* y, int64_t n_tokens,
              const SsmShape& shape, float* states_after, ThreadPool* pool) {
  ssm_scan_isa(state, x, x_stride, dt, dt_stride, A, B, C, bc_stride, y, n_tokens, shape, states_after, pool,
               best_isa());
}

void ssm_scan_isa(float* state, const float* x, int64_t x_stride, const float* dt, int64_t dt_stride,
                  const float* A, const float* B, const float* C, int64_t bc_stride, float* y, int64_t n_tokens,
                  const SsmShape& shape, float* states_after, ThreadPool* pool, Isa isa) {
  assert(shape.n_groups > 0 && shape.n_heads % shape.n_groups == 0);
  require_isa(isa, "ssm_scan");
  const recurrent::SsmArgs args{state, x, x_stride, dt, dt_stride, A, B, C, bc_stride, y, n_tokens, shape,
                                states_after};
  auto* heads = isa_has_avx512(isa) ? &recurrent::ssm_scan_heads_avx512
                : isa_has_avx2(isa) ? &recurrent::ssm_scan_heads_avx2
                                    : &recurrent::ssm_scan_heads_reference;
  over_heads(shape.n_heads, pool, [&](int64_t begin, int64_t end) { heads(args, begin, end); });
}

void l2_norm_heads(float* x, int64_t n_rows, int64_t stride, int64_t n_heads, int64_t d, float eps) {
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t h = 0; h < n_heads; ++h) {
      float* head = x + r * stride + h * d;
      double sum_squares = 0;
      for (int64_t i = 0; i < d; ++i) sum_squares += double(head[i]) * head[i];
      const float inv_norm = 1.0f / std::fmax(static_cast<float>(std::sqrt(sum_squares)), eps);
      for (int64_t i = 0; i < d; ++i) head[i] *= inv_norm;
    }
}

void rms_norm_gated(const float* x, const float* z, const float* w, int64_t w_len, float* y, int64_t n_rows,
                    int64_t n, int64_t group, float eps, bool gate_first) {
  assert(n % group == 0);
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t g0 = 0; g0 < n; g0 += group) {
      const float* xg = x + r * n + g0;
      const float* zg = z + r * n + g0;
      float* yg = y + r * n + g0;
      // Each output is written after its own inputs are read, so y may be x.
      double sum_squares = 0;
      for (int64_t i = 0; i < group; ++i) {
        const float v = gate_first ? xg[i] * silu_one(zg[i]) : xg[i];
        sum_squares += double(v) * v;
      }
      const float inv_rms = 1.0f / std::sqrt(static_cast<float>(sum_squares / double(group)) + eps);
      for (int64_t i = 0; i < group; ++i) {
        const float weight = w[(g0 + i) % w_len];
        yg[i] = gate_first ? xg[i] * silu_one(zg[i]) * inv_rms * weight : xg[i] * inv_rms * weight * silu_one(zg[i]);
      }
    }
}

}  // namespace ridge::kernels
