// Which instruction set the kernels run with: chosen once at run time from the CPU, and
// selectable in tests and benchmarks so each fast path is checked against its scalar
// reference on the same machine.
//
//   if (best_isa() == Isa::kAvx2) { ... }   // AVX2 + FMA + F16C present
#pragma once

namespace ridge::kernels {

enum class Isa { kScalar, kAvx2 };

// kAvx2 when the CPU has AVX2, FMA and F16C; else kScalar.
Isa best_isa();

}  // namespace ridge::kernels
