// What the rest of ridge calls of kernels/ops/: the row and elementwise kernels of the
// forward pass here (RMS norm, residual add, activations: SiLU, tanh-GELU, and their
// gated SwiGLU/GeGLU forms, softmax, logit soft-capping), RoPE (rope.h) and the
// Hadamard rotation (hadamard.h). References in double for the tests sit in
// ops_reference.h.
//
//   rms_norm(x, attn_norm, h, n_tokens, n_embd, 1e-6f);   // h[t] = x[t] / rms(x[t]) * w
//   swiglu(gate, up, act, n_tokens * n_ff);                // act = silu(gate) * up
#pragma once

#include <cstdint>

#include "kernels/ops/hadamard.h"
#include "kernels/ops/rope.h"

namespace ridge::kernels {

// y[r][i] = x[r][i] / sqrt(mean_i(x[r]^2) + eps) * weight[i]  (weight null: no multiply).
// GGUF stores Gemma's norm weights with the +1 already folded in, so this is plain x*w.
//   x, y: [n_rows][n] (y may equal x)   weight: [n]
void rms_norm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n, float eps);

// y = a + b, elementwise over n (y may equal a or b): the residual add.
void add(const float* a, const float* b, float* y, int64_t n);

// y = a * b, elementwise (y may equal a or b).
void mul(const float* a, const float* b, float* y, int64_t n);

// x *= s over n (e.g. Gemma's sqrt(n_embd) embedding scale).
void scale(float* x, int64_t n, float s);

// silu(x) = x / (1 + exp(-x)). y may equal x.
void silu(const float* x, float* y, int64_t n);

// GELU, tanh approximation as ggml and gelu_pytorch_tanh compute it:
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). y may equal x.
void gelu(const float* x, float* y, int64_t n);

// Gated MLP activations: y = act(gate) * up, elementwise (y may equal gate or up).
void swiglu(const float* gate, const float* up, float* y, int64_t n);  // act = silu
void geglu(const float* gate, const float* up, float* y, int64_t n);   // act = gelu

// In-place softmax of each row: x[r][i] = exp(x[r][i] - max) / sum.   x: [n_rows][n]
void softmax(float* x, int64_t n_rows, int64_t n);

// Logit soft-capping (Gemma 2 style): x = tanh(x / cap) * cap over n; cap > 0.
void softcap(float* x, int64_t n, float cap);

}  // namespace ridge::kernels
