// Float dot products, the inner loop of matmul and attention: a scalar reference and an
// AVX2+FMA version in its own translation unit, chosen once at run time (best_isa()).
//
//   float s = dot_f32(a, b, n);          // fastest available
//   float r = dot_f32_scalar(a, b, n);   // reference it is tested against
#pragma once

#include <cstdint>

namespace ridge::kernels {

// Sum of a[i] * b[i], i < n. Dispatches to dot_f32_avx2 when best_isa() has AVX2.
float dot_f32(const float* a, const float* b, int64_t n);

// Reference: four float partial sums over i % 4, added in a fixed order.
float dot_f32_scalar(const float* a, const float* b, int64_t n);

// AVX2+FMA; call only when cpu_supports(Isa::kAvx2). Defined in dot_avx2.cpp.
float dot_f32_avx2(const float* a, const float* b, int64_t n);

// y[i] += a * x[i], i < n (auto-vectorized; no reduction, so no order question).
inline void axpy_f32(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace ridge::kernels
