// The FMA-throughput kernel of probe.h, compiled for AVX2+FMA whatever the build's
// target (the caller checks cpu_has_avx2_fma first).
#include <immintrin.h>

#include "plan/probe.h"

namespace ridge::plan {

bool cpu_has_avx2_fma() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

__attribute__((target("avx2,fma"))) float fma_chains_avx2(long iterations) {
  // x <- x * a + b converges to b / (1 - a) = 1, so nothing overflows or goes subnormal.
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  __m256 c0 = _mm256_set1_ps(0.0f), c1 = _mm256_set1_ps(0.1f), c2 = _mm256_set1_ps(0.2f),
         c3 = _mm256_set1_ps(0.3f), c4 = _mm256_set1_ps(0.4f), c5 = _mm256_set1_ps(0.5f),
         c6 = _mm256_set1_ps(0.6f), c7 = _mm256_set1_ps(0.7f), c8 = _mm256_set1_ps(0.8f),
         c9 = _mm256_set1_ps(0.9f), c10 = _mm256_set1_ps(1.1f), c11 = _mm256_set1_ps(1.2f);
  for (long i = 0; i < iterations; ++i) {
    c0 = _mm256_fmadd_ps(c0, a, b);
    c1 = _mm256_fmadd_ps(c1, a, b);
    c2 = _mm256_fmadd_ps(c2, a, b);
    c3 = _mm256_fmadd_ps(c3, a, b);
    c4 = _mm256_fmadd_ps(c4, a, b);
    c5 = _mm256_fmadd_ps(c5, a, b);
    c6 = _mm256_fmadd_ps(c6, a, b);
    c7 = _mm256_fmadd_ps(c7, a, b);
    c8 = _mm256_fmadd_ps(c8, a, b);
    c9 = _mm256_fmadd_ps(c9, a, b);
    c10 = _mm256_fmadd_ps(c10, a, b);
    c11 = _mm256_fmadd_ps(c11, a, b);
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                           _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float total = 0.0f;
  for (float v : lanes) total += v;
  return total;
}

}  // namespace ridge::plan
