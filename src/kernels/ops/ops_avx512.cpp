// AVX-512F versions of the activation kernels in ops/ops_avx2.cpp, lane for lane the same
// operations (exp512 is exp256 on 16 lanes; the division is IEEE in both), so outputs do
// not depend on which of the two ran. A prompt's gated activation (n_ff per token, formed
// as the down projection quantizes its input) took 5% of prefill on AVX2 vectors.
#include <immintrin.h>

#include <cstdint>

#include "kernels/ops/ops_avx512.h"

#pragma GCC target("avx2,fma,avx512f,avx512dq")
// GCC 12 warns that the intrinsics' _mm512_undefined_*() pass-throughs are uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/avx512_math.h"

namespace ridge::kernels {

namespace {

// x * sigmoid(z) = x / (1 + exp(-z)).
inline __m512 gated(__m512 x, __m512 z) {
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp512(_mm512_sub_ps(_mm512_setzero_ps(), z))));
}

inline __m512 silu16(__m512 x) { return gated(x, x); }

inline __m512 gelu16(__m512 x) {
  const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
  const __m512 u = _mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f), _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x3, x));
  return gated(x, _mm512_add_ps(u, u));
}

// y[i] = f(a[i]) (* b[i]); the tail through masked loads (zeros) and a masked store.
template <__m512 (*F)(__m512), bool kGated>
void apply(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const auto mask = static_cast<__mmask16>(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
    __m512 v = F(_mm512_maskz_loadu_ps(mask, a + i));
    if constexpr (kGated) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mask, b + i));
    _mm512_mask_storeu_ps(y + i, mask, v);
  }
}

}  // namespace

void silu_avx512(const float* x, float* y, int64_t n) { apply<silu16, false>(x, nullptr, y, n); }
void gelu_avx512(const float* x, float* y, int64_t n) { apply<gelu16, false>(x, nullptr, y, n); }
void swiglu_avx512(const float* gate, const float* up, float* y, int64_t n) { apply<silu16, true>(gate, up, y, n); }
void geglu_avx512(const float* gate, const float* up, float* y, int64_t n) { apply<gelu16, true>(gate, up, y, n); }

}  // namespace ridge::kernels
