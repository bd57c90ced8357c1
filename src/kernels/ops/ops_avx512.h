// AVX-512F versions of ops_avx2.h's activation kernels (ops/ops_avx512.cpp): the same
// operations on 16 lanes, so each element is bit-identical to the AVX2 kernel's. Call
// only when isa_has_avx512(best_isa()). Same contracts as the ops/ops.h functions.
#pragma once

#include <cstdint>

namespace ridge::kernels {

void silu_avx512(const float* x, float* y, int64_t n);
void gelu_avx512(const float* x, float* y, int64_t n);
void swiglu_avx512(const float* gate, const float* up, float* y, int64_t n);
void geglu_avx512(const float* gate, const float* up, float* y, int64_t n);

}  // namespace ridge::kernels
