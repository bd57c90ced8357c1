// AVX2+FMA versions of the activation kernels of ops/ops.h. Both gates are x * sigmoid(z):
// silu: z = x; tanh-GELU: 0.5 (1 + tanh(u)) = sigmoid(2u), so z = 2u with
// u = sqrt(2/pi) (x + 0.044715 x^3). One exp per element, through the same polynomial as
// attention's softmax. ops/ops.cpp dispatches here only when the CPU has AVX2 and FMA.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/ops/ops_avx2.h"

#pragma GCC target("avx2,fma")

#include "kernels/avx2_math.h"

namespace ridge::kernels {

namespace {

// x * sigmoid(z) = x / (1 + exp(-z)).
inline __m256 gated(__m256 x, __m256 z) {
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp256(_mm256_sub_ps(_mm256_setzero_ps(), z))));
}

inline __m256 silu8(__m256 x) { return gated(x, x); }

inline __m256 gelu8(__m256 x) {
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 u = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
  return gated(x, _mm256_add_ps(u, u));
}

// y[i] = f(a[i]) (* b[i]); the tail goes through a zero-padded vector.
template <__m256 (*F)(__m256), bool kGated>
void apply(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = F(_mm256_loadu_ps(a + i));
    if constexpr (kGated) v = _mm256_mul_ps(v, _mm256_loadu_ps(b + i));
    _mm256_storeu_ps(y + i, v);
  }
  if (i < n) {
    alignas(32) float ta[8] = {}, tb[8] = {};
    for (int64_t j = i; j < n; ++j) {
      ta[j - i] = a[j];
      if constexpr (kGated) tb[j - i] = b[j];
    }
    __m256 v = F(_mm256_load_ps(ta));
    if constexpr (kGated) v = _mm256_mul_ps(v, _mm256_load_ps(tb));
    _mm256_store_ps(ta, v);
    for (int64_t j = i; j < n; ++j) y[j] = ta[j - i];
  }
}

}  // namespace

void silu_avx2(const float* x, float* y, int64_t n) { apply<silu8, false>(x, nullptr, y, n); }
void gelu_avx2(const float* x, float* y, int64_t n) { apply<gelu8, false>(x, nullptr, y, n); }
void swiglu_avx2(const float* gate, const float* up, float* y, int64_t n) { apply<silu8, true>(gate, up, y, n); }
void geglu_avx2(const float* gate, const float* up, float* y, int64_t n) { apply<gelu8, true>(gate, up, y, n); }

}  // namespace ridge::kernels
