// The per-ISA paths behind recurrent.h (internal to kernels/recurrent/): each walks a range
// of heads (or, for the convolution, all channels) on the calling thread; recurrent.cpp
// chooses the path and splits the heads over the pool. The AVX2 paths need
// cpu_supports(Isa::kAvx2), the AVX-512 ones cpu_supports(Isa::kAvx512Vnni).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/recurrent/recurrent.h"

namespace ridge::kernels::recurrent {

// gated_delta_rule's arguments, as recurrent.h documents them.
struct DeltaNetArgs {
  float* state;          // [n_heads][d_v][d_k]
  const float* q;        // [n_tokens][qk_stride]
  const float* k;        // [n_tokens][qk_stride]
  int64_t qk_stride;
  const float* v;        // [n_tokens][v_stride]
  int64_t v_stride;
  const float* g;        // [n_tokens][n_heads]
  const float* beta;     // [n_tokens][n_heads]
  float* out;            // [n_tokens][n_heads*d_v]
  int64_t n_tokens;
  DeltaNetShape shape;
  float* states_after;   // [n_tokens][n_heads][d_v][d_k] or null
};

// ssm_scan's arguments, as recurrent.h documents them.
struct SsmArgs {
  float* state;          // [n_heads][head_dim][d_state]
  const float* x;        // [n_tokens][x_stride]
  int64_t x_stride;
  const float* dt;       // [n_tokens][dt_stride]
  int64_t dt_stride;
  const float* A;        // [n_heads]
  const float* B;        // [n_tokens][bc_stride]
  const float* C;        // [n_tokens][bc_stride]
  int64_t bc_stride;
  float* y;              // [n_tokens][n_heads*head_dim]
  int64_t n_tokens;
  SsmShape shape;
  float* states_after;   // [n_tokens][n_heads][head_dim][d_state] or null
};

// Mamba2's dt -> delta: log1p(exp(x)), and x itself past 20 (llama.cpp's cut-off).
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void gated_delta_rule_heads_reference(const DeltaNetArgs& a, int64_t h_begin, int64_t h_end);
void gated_delta_rule_heads_avx2(const DeltaNetArgs& a, int64_t h_begin, int64_t h_end);
void gated_delta_rule_heads_avx512(const DeltaNetArgs& a, int64_t h_begin, int64_t h_end);

void ssm_scan_heads_reference(const SsmArgs& a, int64_t h_begin, int64_t h_end);
void ssm_scan_heads_avx2(const SsmArgs& a, int64_t h_begin, int64_t h_end);
void ssm_scan_heads_avx512(const SsmArgs& a, int64_t h_begin, int64_t h_end);

void causal_conv1d_avx2(float* state, const float* x, int64_t x_stride, const float* w, const float* bias,
                        float* y, int64_t n_tokens, int64_t channels, int d_conv, bool silu);
void causal_conv1d_avx512(float* state, const float* x, int64_t x_stride, const float* w, const float* bias,
                          float* y, int64_t n_tokens, int64_t channels, int d_conv, bool silu);

}  // namespace ridge::kernels::recurrent
