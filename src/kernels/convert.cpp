#include "kernels/convert.h"

#include "core/fp16.h"

namespace ridge::kernels {

namespace {

void f16_to_f32_scalar(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

}  // namespace

bool cpu_has_f16c_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return has;
#else
  return false;
#endif
}

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  using Fn = void (*)(const uint16_t*, float*, int64_t);
  static const Fn fn = cpu_has_f16c_avx2() ? &f16_to_f32_f16c : &f16_to_f32_scalar;
  fn(src, dst, n);
}

}  // namespace ridge::kernels
