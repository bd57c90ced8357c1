// The AVX2+FMA paths of kernels/recurrent/ (on kAvx2 and kAvxVnni): recurrent/simd.h on 8
// lanes, tails through masked loads and stores. recurrent.cpp reaches them only after
// best_isa() or require_isa() has checked the CPU.
#include <immintrin.h>

#include <cstdint>

#include "kernels/recurrent/paths.h"

#pragma GCC target("avx2,fma")

#include "kernels/avx2_math.h"
#include "kernels/recurrent/simd.h"

namespace ridge::kernels::recurrent {

namespace {

struct Avx2 {
  using F = __m256;
  using M = __m256i;
  static constexpr int kWidth = 8;
  static constexpr int kRows = 4;  // 4 accumulators + k, q and 4 updates in 16 registers
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static F maskz_load(M m, const float* p) { return _mm256_maskload_ps(p, m); }
  static void mask_store(float* p, M m, F x) { _mm256_maskstore_ps(p, m, x); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F exp(F x) { return exp256(x); }
  static float hsum(F x) { return kernels::hsum(x); }
  static M tail(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static M full() { return _mm256_set1_epi32(-1); }
  static F gather(const float* p, int stride, M m) {
    const __m256i index = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(stride));
    return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), p, index, _mm256_castsi256_ps(m), 4);
  }
};

}  // namespace

void gated_delta_rule_heads_avx2(const DeltaNetArgs& a, int64_t h_begin, int64_t h_end) {
  gated_delta_rule_heads<Avx2>(a, h_begin, h_end);
}

void ssm_scan_heads_avx2(const SsmArgs& a, int64_t h_begin, int64_t h_end) { ssm_scan_heads<Avx2>(a, h_begin, h_end); }

void causal_conv1d_avx2(float* state, const float* x, int64_t x_stride, const float* w, const float* bias,
                        float* y, int64_t n_tokens, int64_t channels, int d_conv, bool silu) {
  causal_conv1d<Avx2>(state, x, x_stride, w, bias, y, n_tokens, channels, d_conv, silu);
}

}  // namespace ridge::kernels::recurrent
