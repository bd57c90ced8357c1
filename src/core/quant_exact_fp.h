// Include FIRST in a quant reference .cpp file: stops the compiler from fusing a*b+c
// into one FMA for the rest of that file.
//
//   #include "core/quant_exact_fp.h"  // before any other include
//
// GCC contracts to FMA by default in C++ even under -std=c++20 (its ISO-mode default of
// -ffp-contract=off applies to C only), and clang fuses within an expression. A fused
// multiply-add rounds once instead of twice, so codes and dequantized values would drift
// from GGUF's reference by a bit here and there; the quant formats are defined by the
// unfused operations. Hand-written SIMD kernels are unaffected (they call FMA explicitly).
#pragma once

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
