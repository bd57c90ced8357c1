// The AVX-512 paths of kernels/recurrent/ (on kAvx512Vnni and kAmxInt8): recurrent/simd.h on
// 16 lanes, tails through mask registers. recurrent.cpp reaches them only after best_isa()
// or require_isa() has checked the CPU.
#include <immintrin.h>

#include <cstdint>

#include "kernels/recurrent/paths.h"

#pragma GCC target("avx2,fma,avx512f,avx512dq")
// GCC 12 warns that the intrinsics' _mm512_undefined_*() pass-throughs are uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/avx512_math.h"
#include "kernels/recurrent/simd.h"

namespace ridge::kernels::recurrent {

namespace {

struct Avx512 {
  using F = __m512;
  using M = __mmask16;
  static constexpr int kWidth = 16;
  static constexpr int kRows = 4;
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F x) { _mm512_storeu_ps(p, x); }
  static F maskz_load(M m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
  static void mask_store(float* p, M m, F x) { _mm512_mask_storeu_ps(p, m, x); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F exp(F x) { return exp512(x); }
  static float hsum(F x) { return _mm512_reduce_add_ps(x); }
  static M tail(int64_t n) { return static_cast<M>((1u << n) - 1); }  // n in [0, 16)
  static M full() { return static_cast<M>(0xffff); }
  static F gather(const float* p, int stride, M m) {
    const __m512i index = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                             _mm512_set1_epi32(stride));
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, index, p, 4);
  }
};

}  // namespace

void gated_delta_rule_heads_avx512(const DeltaNetArgs& a, int64_t h_begin, int64_t h_end) {
  gated_delta_rule_heads<Avx512>(a, h_begin, h_end);
}

void ssm_scan_heads_avx512(const SsmArgs& a, int64_t h_begin, int64_t h_end) {
  ssm_scan_heads<Avx512>(a, h_begin, h_end);
}

void causal_conv1d_avx512(float* state, const float* x, int64_t x_stride, const float* w, const float* bias,
                          float* y, int64_t n_tokens, int64_t channels, int d_conv, bool silu) {
  causal_conv1d<Avx512>(state, x, x_stride, w, bias, y, n_tokens, channels, d_conv, silu);
}

}  // namespace ridge::kernels::recurrent
