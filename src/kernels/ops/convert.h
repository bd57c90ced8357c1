// Row conversions with an F16C version selected at run time: F16 rows to floats (e.g.
// an F16 KV row or weight row) faster than the scalar reference dequantizer. matmul's
// F16 weights no longer come here: gemm/avx2.cpp converts them in registers.
//
//   f16_to_f32(row, buffer, n_in);   // uint16_t IEEE halves -> float
#pragma once

#include <cstdint>

namespace ridge::kernels {

// dst[i] = float(src[i]). NaN payloads are unspecified (F16C quiets signalling NaNs).
void f16_to_f32(const uint16_t* src, float* dst, int64_t n);

// The F16C+AVX2 version; call only when cpu_supports(Isa::kAvx2). Defined in convert_avx2.cpp.
void f16_to_f32_f16c(const uint16_t* src, float* dst, int64_t n);

}  // namespace ridge::kernels
