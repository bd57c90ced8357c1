// AVX2+FMA activation kernels behind ops/ops.h's silu/gelu/swiglu/geglu (ops/ops_avx2.cpp);
// call only when cpu_supports(Isa::kAvx2). Same contracts as the ops/ops.h functions.
#pragma once

#include <cstdint>

namespace ridge::kernels {

void silu_avx2(const float* x, float* y, int64_t n);
void gelu_avx2(const float* x, float* y, int64_t n);
void swiglu_avx2(const float* gate, const float* up, float* y, int64_t n);
void geglu_avx2(const float* gate, const float* up, float* y, int64_t n);

}  // namespace ridge::kernels
