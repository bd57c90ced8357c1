// F16C conversions; the target attribute lets this file build without -mf16c, and
// callers reach it only through the run-time check in ops/convert.cpp.
#include "kernels/ops/convert.h"

#include "core/fp16.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace ridge::kernels {

__attribute__((target("avx2,f16c"))) void f16_to_f32_f16c(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

}  // namespace ridge::kernels

#else

namespace ridge::kernels {
void f16_to_f32_f16c(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}
}  // namespace ridge::kernels

#endif
