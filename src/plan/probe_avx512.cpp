// The loops of probe.h for AVX-512: vpdpbusd on zmm (64 u8 x s8 multiply-adds into 16
// int32 sums) and 16-wide f32 FMA, compiled for them whatever the build's target (the
// caller checks kernels::cpu_supports(Isa::kAvx512Vnni) first).
#include <immintrin.h>

#include "plan/probe.h"

namespace ridge::plan {

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) int32_t int8_chains_avx512(long iterations) {
  // 12 independent chains cover vpdpbusd's latency on the ports that issue it. The int32
  // sums wrap harmlessly.
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  __m512i c[12];
  for (int k = 0; k < 12; ++k) c[k] = _mm512_set1_epi32(k);
  for (long i = 0; i < iterations; ++i)
    for (int k = 0; k < 12; ++k) c[k] = _mm512_dpbusd_epi32(c[k], u, s);
  __m512i t = c[0];
  for (int k = 1; k < 12; ++k) t = _mm512_add_epi32(t, c[k]);
  return _mm512_reduce_add_epi32(t);
}

__attribute__((target("avx512f"))) float fma_chains_avx512(long iterations) {
  // x <- x * a + b converges to b / (1 - a) = 1, so nothing overflows or goes subnormal.
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  __m512 c[12];
  for (int k = 0; k < 12; ++k) c[k] = _mm512_set1_ps(0.1f * static_cast<float>(k));
  for (long i = 0; i < iterations; ++i)
    for (int k = 0; k < 12; ++k) c[k] = _mm512_fmadd_ps(c[k], a, b);
  __m512 t = c[0];
  for (int k = 1; k < 12; ++k) t = _mm512_add_ps(t, c[k]);
  return _mm512_reduce_add_ps(t);
}

}  // namespace ridge::plan
