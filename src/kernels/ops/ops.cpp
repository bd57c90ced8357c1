#include "kernels/ops/ops.h"

#include <cmath>

#include "kernels/ops/dot.h"
#include "kernels/isa.h"
#include "kernels/ops/ops_avx2.h"
#include "kernels/ops/ops_avx512.h"

namespace ridge::kernels {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

inline float silu_one(float x) { return x / (1.0f + std::exp(-x)); }

inline float gelu_one(float x) {
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kGeluCubic * x * x)));
}

}  // namespace

void rms_norm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n, float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float sum_squares = dot_f32(xr, xr, n);
    const float inv_rms = 1.0f / std::sqrt(sum_squares / static_cast<float>(n) + eps);
    if (weight != nullptr) {
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv_rms * weight[i];
    } else {
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv_rms;
    }
  }
}

void add(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void mul(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

void scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void silu(const float* x, float* y, int64_t n) {
  const Isa isa = best_isa();
  if (isa_has_avx512(isa)) return silu_avx512(x, y, n);
  if (isa_has_avx2(isa)) return silu_avx2(x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = silu_one(x[i]);
}

void gelu(const float* x, float* y, int64_t n) {
  const Isa isa = best_isa();
  if (isa_has_avx512(isa)) return gelu_avx512(x, y, n);
  if (isa_has_avx2(isa)) return gelu_avx2(x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = gelu_one(x[i]);
}

void swiglu(const float* gate, const float* up, float* y, int64_t n) {
  const Isa isa = best_isa();
  if (isa_has_avx512(isa)) return swiglu_avx512(gate, up, y, n);
  if (isa_has_avx2(isa)) return swiglu_avx2(gate, up, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = silu_one(gate[i]) * up[i];
}

void geglu(const float* gate, const float* up, float* y, int64_t n) {
  const Isa isa = best_isa();
  if (isa_has_avx512(isa)) return geglu_avx512(gate, up, y, n);
  if (isa_has_avx2(isa)) return geglu_avx2(gate, up, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = gelu_one(gate[i]) * up[i];
}

void softmax(float* x, int64_t n_rows, int64_t n) {
  for (int64_t r = 0; r < n_rows; ++r) {
    float* xr = x + r * n;
    float max_value = -INFINITY;
    for (int64_t i = 0; i < n; ++i) max_value = std::fmax(max_value, xr[i]);
    double sum = 0;  // rows can be vocabulary-long; a float sum would drift
    for (int64_t i = 0; i < n; ++i) {
      xr[i] = std::exp(xr[i] - max_value);
      sum += xr[i];
    }
    const float inv_sum = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) xr[i] *= inv_sum;
  }
}

void softcap(float* x, int64_t n, float cap) {
  const float inv_cap = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i] * inv_cap) * cap;
}

}  // namespace ridge::kernels
