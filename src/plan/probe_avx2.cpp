// The register-only loops of probe.h for AVX2+FMA, compiled for it whatever the build's
// target (the callers check kernels::cpu_supports(Isa::kAvx2) first).
#include <immintrin.h>

#include "plan/probe.h"

namespace ridge::plan {

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

// AVX2's int8 multiply-add, as the AVX2 GEMM tiles do it: vpmaddubsw (u8 x s8 pairs to
// s16), vpmaddwd against ones (pairs to s32), vpaddd into the sum; 32 multiply-adds per
// step. The products do not depend on the sums, so the empty asm makes the inputs opaque
// each iteration (no instruction) lest the compiler hoist them out of the loop.
__attribute__((target("avx2,fma"))) int32_t int8_chains_avx2(long iterations) {
  const __m256i ones = _mm256_set1_epi16(1), w = _mm256_set1_epi8(3);
  __m256i x0 = _mm256_set1_epi8(1), x1 = _mm256_set1_epi8(2), x2 = _mm256_set1_epi8(3),
          x3 = _mm256_set1_epi8(4), x4 = _mm256_set1_epi8(5), x5 = _mm256_set1_epi8(6);
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0;
  for (long i = 0; i < iterations; ++i) {
    __asm__("" : "+x"(x0), "+x"(x1), "+x"(x2), "+x"(x3), "+x"(x4), "+x"(x5));
    s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_maddubs_epi16(x0, w), ones));
    s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_maddubs_epi16(x1, w), ones));
    s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(_mm256_maddubs_epi16(x2, w), ones));
    s3 = _mm256_add_epi32(s3, _mm256_madd_epi16(_mm256_maddubs_epi16(x3, w), ones));
    s4 = _mm256_add_epi32(s4, _mm256_madd_epi16(_mm256_maddubs_epi16(x4, w), ones));
    s5 = _mm256_add_epi32(s5, _mm256_madd_epi16(_mm256_maddubs_epi16(x5, w), ones));
  }
  const __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(s0, s1), _mm256_add_epi32(s2, s3)),
                                     _mm256_add_epi32(s4, s5));
  return _mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7);
}

}  // namespace ridge::plan
