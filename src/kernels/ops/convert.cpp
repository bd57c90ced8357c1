#include "kernels/ops/convert.h"

#include "core/fp16.h"
#include "kernels/isa.h"

namespace ridge::kernels {

namespace {

void f16_to_f32_scalar(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

}  // namespace

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  using Fn = void (*)(const uint16_t*, float*, int64_t);
  static const Fn fn = isa_has_avx2(best_isa()) ? &f16_to_f32_f16c : &f16_to_f32_scalar;
  fn(src, dst, n);
}

}  // namespace ridge::kernels
