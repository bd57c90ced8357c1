// Software prefetches the compiler cannot drop. _mm_prefetch is a builtin without side
// effects as far as GCC's dead-code elimination goes: a loop whose body is only
// prefetches may be deleted whole when it is not unrolled (-ffinite-loops), and it was,
// silently, in the AVX-512 kernels for 4-16 tokens (docs/notes/kernels.md, "Batched
// decode: prefetches the compiler had dropped"). A volatile asm stays where it is written.
#pragma once

#include <cstddef>

namespace ridge::kernels {

// The line holding p into L1 (prefetcht0) or L2 (prefetcht1).
inline void prefetch_l1(const void* p) { __asm__ volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p))); }
inline void prefetch_l2(const void* p) { __asm__ volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p))); }

// The AVX2 decode kernels read a row at a time: each thread's rows are one sequential
// stream, which the hardware prefetcher follows only within a 4 KiB page, restarting at
// every page. Each step asks for its bytes' lines this far ahead, into L1: on the Intel
// Xeon (family 6 model 167) the Q4_K kernel streamed 1.6x faster with it (512 bytes
// ahead: 1.4x; 4 KiB: as 2 KiB). Prefetching past a row's end reads the next row, and
// past the matrix, nothing (a prefetch does not fault).
constexpr size_t kStreamAheadBytes = 2048;
inline void prefetch_stream_ahead(const void* p, size_t bytes) {
  const char* q = static_cast<const char*>(p) + kStreamAheadBytes;
  for (size_t o = 0; o < bytes; o += 64) prefetch_l1(q + o);
}

// Kernels that read a tile of rows side by side (4 short streams the hardware prefetcher
// barely starts) ask, as they read, for the same line of the next tile's rows: the line
// `offset` bytes into each of `rows` rows `stride` bytes apart from `first`, into L1.
inline void prefetch_rows_l1(const void* first, size_t stride, int rows, size_t offset) {
  const char* p = static_cast<const char*>(first) + offset;
  for (int r = 0; r < rows; ++r) prefetch_l1(p + r * stride);
}

}  // namespace ridge::kernels
