#include "kernels/ops/dot.h"

#include "kernels/isa.h"

namespace ridge::kernels {

float dot_f32_scalar(const float* a, const float* b, int64_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

float dot_f32(const float* a, const float* b, int64_t n) {
  using Fn = float (*)(const float*, const float*, int64_t);
  static const Fn fn = isa_has_avx2(best_isa()) ? &dot_f32_avx2 : &dot_f32_scalar;
  return fn(a, b, n);
}

}  // namespace ridge::kernels
