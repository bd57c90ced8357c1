// Software prefetches the compiler cannot drop. _mm_prefetch is a builtin without side
// effects as far as GCC's dead-code elimination goes: a loop whose body is only
// prefetches may be deleted whole when it is not unrolled (-ffinite-loops), and it was,
// silently, in the AVX-512 kernels for 4-16 tokens (docs/benchmarks.md, "Batched decode:
// prefetches the compiler had dropped"). A volatile asm stays where it is written.
#pragma once

namespace ridge::kernels {

// The line holding p into L1 (prefetcht0) or L2 (prefetcht1).
inline void prefetch_l1(const void* p) { __asm__ volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p))); }
inline void prefetch_l2(const void* p) { __asm__ volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p))); }

}  // namespace ridge::kernels
