// Which instruction set the kernels run with: chosen once at run time from the CPU, and
// selectable in tests and benchmarks so each fast path is checked against its scalar
// reference on the same machine.
//
//   if (best_isa() == Isa::kAvx2) { ... }   // AVX2 + FMA + F16C present
#pragma once

namespace ridge::kernels {

// kAvx512 (AVX-512F on top of kAvx2's set) is taken only by attention, which picks it
// itself (attention_best_isa()); best_isa() never returns it, so the other kernels see
// kAvx2 or kScalar.
enum class Isa { kScalar, kAvx2, kAvx512 };

// kAvx2 when the CPU has AVX2, FMA and F16C; else kScalar.
Isa best_isa();

// AVX-512F (with AVX2, FMA and F16C).
bool cpu_has_avx512f();

// kAvx512 when cpu_has_avx512f(), else best_isa().
Isa attention_best_isa();

}  // namespace ridge::kernels
