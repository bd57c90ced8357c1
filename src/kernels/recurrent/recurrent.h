// What the rest of ridge calls of kernels/recurrent/: the per-token recurrences of the
// hybrid models' linear layers, each over a fixed-size f32 state a sequence carries from
// token to token instead of a K/V row per token.
//   - causal_conv1d: the depthwise causal convolution over time (kernel d_conv, 4 in every
//     released model) that Mamba2 and gated DeltaNet put before their recurrence; its state is
//     the last d_conv-1 inputs.
//   - gated_delta_rule: Qwen3-Next / Qwen 3.5's gated delta rule (Yang et al., "Gated Delta
//     Networks", 2024): S <- exp(g) S;  S <- S + beta k (v - S^T k)^T;  o = S^T q * scale.
//   - ssm_scan: Mamba2's selective scan (Dao & Gu, "Transformers are SSMs", 2024) with a
//     scalar decay per head: h <- exp(dt A) h + dt x B^T;  y = h C (+ D x outside).
//   - l2_norm_heads, rms_norm_gated: the normalisations around them.
// Each has a scalar reference (the *_reference functions, plain loops in float with double
// accumulation where a sum is long) and a fast path per ISA chosen from best_isa() / RIDGE_ISA;
// the *_isa forms take the ISA explicitly for the tests. Float64 references written from the
// papers (tests/python/test_recurrent_reference.py) check both.
//
// State layouts (the delta and ssm states are llama.cpp's, so they can be compared with its
// tensors; the conv state is time-major so one load spans many channels):
//   conv state   [d_conv-1][channels]          oldest input first
//   delta state  [n_heads][d_v][d_k]           row j (a value index) runs over the key index:
//                                              state[h][j][i] = S_h[i][j]
//   ssm state    [n_heads][head_dim][d_state]
//
//   causal_conv1d(conv_state, qkv, qkv_dim, conv_w, nullptr, conv_out, n_tokens, qkv_dim, 4, true);
//   gated_delta_rule(state, q, k, qk_stride, v, v_stride, g, beta, out, n_tokens, shape, nullptr, &pool);
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/isa.h"

namespace ridge::kernels {

// Causal depthwise convolution with a rolling state, over n_tokens new inputs:
//   window_t = [state (d_conv-1 rows, oldest first), x_0 .. x_t] — its last d_conv rows;
//   y[t][c] = sum_{k<d_conv} window_t[k][c] * w[c][k] (+ bias[c]); then y = silu(y) if silu.
// w is GGUF's ssm_conv1d.weight: ne = {d_conv, channels}, so row c holds channel c's taps,
// tap d_conv-1 multiplying the newest input. On return state holds the last d_conv-1 inputs
// (from the old state where n_tokens < d_conv-1).
//   state: [d_conv-1][channels]   x: [n_tokens][x_stride] (the first `channels` floats of a row)
//   w: [channels][d_conv]         bias: [channels] or null     y: [n_tokens][channels]
void causal_conv1d(float* state, const float* x, int64_t x_stride, const float* w, const float* bias,
                   float* y, int64_t n_tokens, int64_t channels, int d_conv, bool silu);
void causal_conv1d_isa(float* state, const float* x, int64_t x_stride, const float* w, const float* bias,
                       float* y, int64_t n_tokens, int64_t channels, int d_conv, bool silu, Isa isa);
void causal_conv1d_reference(float* state, const float* x, int64_t x_stride, const float* w,
                             const float* bias, float* y, int64_t n_tokens, int64_t channels, int d_conv,
                             bool silu);

struct DeltaNetShape {
  int64_t n_heads;    // value heads (ssm.time_step_rank)
  int64_t n_k_heads;  // key/query heads (ssm.group_count); n_heads % n_k_heads == 0
  int64_t d_k;        // key head size (ssm.state_size)
  int64_t d_v;        // value head size (ssm.inner_size / n_heads)
  float q_scale;      // 1/sqrt(d_k) in Qwen3-Next and Qwen 3.5
  bool grouped = false;  // value head h reads key head h / (n_heads / n_k_heads) (Qwen3-Next)
                         // instead of h % n_k_heads (Qwen 3.5)
};
inline int64_t key_head(const DeltaNetShape& s, int64_t h) {
  return s.grouped ? h / (s.n_heads / s.n_k_heads) : h % s.n_k_heads;
}

// The gated delta rule over n_tokens, per value head h (key/query head key_head(h): h %
// n_k_heads, the tiling llama.cpp uses for Qwen 3.5 — its converter orders the value heads
// for it — or h / (n_heads / n_k_heads) for Qwen3-Next, whose value heads stay grouped):
//   S <- exp(g[t][h]) * S
//   u  = beta[t][h] * (v_t - S^T k_t)          (S^T k: for each value index j, sum_i S[i][j] k[i])
//   S <- S + k_t u^T
//   out[t][h*d_v + j] = q_scale * sum_i S[i][j] q_t[i]
// q and k are taken as given (the caller L2-normalises them). States of several sequences are
// separate calls. states_after, when not null, receives the state after every token
// ([n_tokens][n_heads][d_v][d_k]) so speculative decoding can roll back to any accepted
// position without recomputing. pool, when not null, splits the heads over its threads
// (every head's arithmetic is the same whichever thread runs it).
//   state: [n_heads][d_v][d_k]
//   q, k:  [n_tokens][qk_stride], head hk at offset hk*d_k      v: [n_tokens][v_stride], head h at h*d_v
//   g, beta: [n_tokens][n_heads] (g is the log decay, <= 0; beta already through the sigmoid)
//   out:   [n_tokens][n_heads*d_v]
void gated_delta_rule(float* state, const float* q, const float* k, int64_t qk_stride, const float* v,
                      int64_t v_stride, const float* g, const float* beta, float* out, int64_t n_tokens,
                      const DeltaNetShape& shape, float* states_after, ThreadPool* pool);
void gated_delta_rule_isa(float* state, const float* q, const float* k, int64_t qk_stride, const float* v,
                          int64_t v_stride, const float* g, const float* beta, float* out, int64_t n_tokens,
                          const DeltaNetShape& shape, float* states_after, ThreadPool* pool, Isa isa);
void gated_delta_rule_reference(float* state, const float* q, const float* k, int64_t qk_stride,
                                const float* v, int64_t v_stride, const float* g, const float* beta, float* out,
                                int64_t n_tokens, const DeltaNetShape& shape, float* states_after, ThreadPool* pool);

struct SsmShape {
  int64_t n_heads;   // ssm.time_step_rank
  int64_t head_dim;  // ssm.inner_size / n_heads
  int64_t d_state;   // ssm.state_size
  int64_t n_groups;  // ssm.group_count; head h reads group h / (n_heads / n_groups)
};

// Mamba2's selective scan over n_tokens, per head h and channel p (group gr = h / (n_heads/n_groups)):
//   delta = softplus(dt[t][h])                 (dt already holds dt_proj + dt_bias)
//   h[p][n] <- exp(delta * A[h]) * h[p][n] + delta * x[t][h][p] * B[t][gr][n]
//   y[t][h][p] = sum_n h[p][n] * C[t][gr][n]   (the D skip and the gate are the caller's)
// states_after as in gated_delta_rule ([n_tokens][n_heads][head_dim][d_state]).
//   state: [n_heads][head_dim][d_state]   x: [n_tokens][x_stride], head h at h*head_dim
//   dt: [n_tokens][dt_stride] (n_heads used)   A: [n_heads] (GGUF's ssm_a: -exp(A_log))
//   B, C: [n_tokens][bc_stride], group gr at gr*d_state     y: [n_tokens][n_heads*head_dim]
void ssm_scan(float* state, const float* x, int64_t x_stride, const float* dt, int64_t dt_stride,
              const float* A, const float* B, const float* C, int64_t bc_stride, float* y, int64_t n_tokens,
              const SsmShape& shape, float* states_after, ThreadPool* pool);
void ssm_scan_isa(float* state, const float* x, int64_t x_stride, const float* dt, int64_t dt_stride,
                  const float* A, const float* B, const float* C, int64_t bc_stride, float* y, int64_t n_tokens,
                  const SsmShape& shape, float* states_after, ThreadPool* pool, Isa isa);
void ssm_scan_reference(float* state, const float* x, int64_t x_stride, const float* dt, int64_t dt_stride,
                        const float* A, const float* B, const float* C, int64_t bc_stride, float* y,
                        int64_t n_tokens, const SsmShape& shape, float* states_after, ThreadPool* pool);

// x[r][h*d .. h*d+d) /= max(||that head||_2, eps), for n_heads heads of size d in each of
// n_rows rows of stride `stride` (in place). ggml_l2_norm's definition; Qwen 3.5 passes its
// RMS-norm epsilon.
void l2_norm_heads(float* x, int64_t n_rows, int64_t stride, int64_t n_heads, int64_t d, float eps);

// Gated RMS norm on groups of `group` floats, the weight read as w[i % w_len]:
//   gate_first false (Qwen3-Next / Qwen 3.5): y = rms_norm_group(x) * w * silu(z)
//   gate_first true  (Mamba2):                y = rms_norm_group(x * silu(z)) * w
// Qwen 3.5 normalises each value head (group = d_v, w_len = d_v); Mamba2 normalises
// ssm.inner_size / n_groups channels (w_len = inner size). y may equal x.
//   x, z, y: [n_rows][n]  (n % group == 0)
void rms_norm_gated(const float* x, const float* z, const float* w, int64_t w_len, float* y, int64_t n_rows,
                    int64_t n, int64_t group, float eps, bool gate_first);

}  // namespace ridge::kernels
