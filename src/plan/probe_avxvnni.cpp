// The int8 loop of probe.h for AVX-VNNI: vpdpbusd on ymm (32 u8 x s8 multiply-adds into
// 8 int32 sums), compiled for it whatever the build's target (the caller checks
// kernels::cpu_supports(Isa::kAvxVnni) first).
#include <immintrin.h>

#include "plan/probe.h"

namespace ridge::plan {

__attribute__((target("avx2,fma,avxvnni"))) int32_t int8_chains_avxvnni(long iterations) {
  // Each sum feeds its own next vpdpbusd: 12 independent chains cover its latency on
  // both ports. The int32 sums wrap harmlessly.
  const __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2);
  __m256i c[12];
  for (int k = 0; k < 12; ++k) c[k] = _mm256_set1_epi32(k);
  for (long i = 0; i < iterations; ++i)
    for (int k = 0; k < 12; ++k) c[k] = _mm256_dpbusd_avx_epi32(c[k], u, s);
  __m256i t = c[0];
  for (int k = 1; k < 12; ++k) t = _mm256_add_epi32(t, c[k]);
  return _mm256_extract_epi32(t, 0) + _mm256_extract_epi32(t, 7);
}

}  // namespace ridge::plan
