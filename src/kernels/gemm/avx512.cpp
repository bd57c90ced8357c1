// AVX-512 VNNI quantized GEMM: weight rows in vector lanes, so no horizontal sums in
// batches.
//
// The AVX2 tiles put one weight row against several tokens and reduce each block dot
// across lanes. Here a batch of tokens (prefill, or at least K::kPanelTokens sequences)
// first packs a panel of 16 weight rows: every block unpacked to bytes and transposed so
// that one 64-byte vector holds 4 consecutive elements of each of the 16 rows. One
// vpdpbusd against 4 broadcast activation bytes then advances 16 row dots at once, and
// the float scales apply to 16 rows per instruction. The panel is packed once per call
// and reused by every token (4 at a time, so each packed vector loaded serves 4).
// Batches of up to 16 tokens (batched decode) pack one block of the 16 rows at a time
// instead and run all their tokens over it, so packing never waits for memory alone.
// The GGUF bytes stay as they are (zero-copy); the panel is per-thread scratch that fits
// in L2.
//
// Decode and small batches keep the row-major weights and put 8 rows in the lanes of
// the per-block results (a lane-sum tree per token and block).
//
// Both compute, for every (row, token) pair, exactly the scalar references' sequence
// (gemm/reference.cpp): the exact integer dot of each block, then one fma per block in block order
// (two for Q4_K/Q5_K and Q4_1/Q5_1: scales, then mins). So results are bit-identical to
// the scalar reference, and a token's output does not depend on its batch.
//
// Unsigned weights go into vpdpbusd as they are; the offset (q - 2^kShift) comes off
// through the activations' block sums. Q8_0 weights become unsigned by flipping the sign
// bit (w + 128), kShift 7.
//
//
// The shared parts are in avx512_panels.h, the K-quant families in avx512_kquants.h,
// NF4 and I8_ROWS in avx512_bnb_panels.h; this file holds the kernel table's entries.
#include <immintrin.h>

#include <cstdlib>
#include <memory>

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bitalg")
// GCC 12 reports its own AVX-512 intrinsics' _mm512_undefined_*() placeholders as
// "may be used uninitialized"; the values are always overwritten.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/gemm/avx512_panels.h"
#include "kernels/gemm/avx512_kquants.h"
#include "kernels/gemm/avx512_bnb_panels.h"

namespace ridge::kernels {

uint8_t* gemm_thread_buffer(int slot, size_t bytes, const char* what) {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<uint8_t, Free> buffers[kGemmBufferSlots];
  thread_local size_t capacity[kGemmBufferSlots] = {};
  if (bytes > capacity[slot]) {
    const size_t rounded = (bytes + 4095) / 4096 * 4096;
    buffers[slot].reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
    if (!buffers[slot]) {
      capacity[slot] = 0;
      throw Error(str_cat("gemm: cannot allocate ", rounded, " bytes of ", what));
    }
    capacity[slot] = rounded;
  }
  return buffers[slot].get();
}

void gemm_q8_0_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<Q8Family<U8Q8_0>>(a, n_rows, n_tokens); }
void gemm_q4_0_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<Q8Family<U8Q4_0>>(a, n_rows, n_tokens); }
void gemm_q5_0_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<Q8Family<U8Q5_0>>(a, n_rows, n_tokens); }
void gemm_q4_1_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<Q8Family<U8Q4_1>>(a, n_rows, n_tokens); }
void gemm_q5_1_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<Q8Family<U8Q5_1>>(a, n_rows, n_tokens); }
void gemm_q4_k_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<QK4<false>>(a, n_rows, n_tokens); }
void gemm_q5_k_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<QK4<true>>(a, n_rows, n_tokens); }
void gemm_q6_k_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<Q6K>(a, n_rows, n_tokens); }
void gemm_nf4_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  if (n_tokens < kBnbPanelTokens) return gemm_nf4_avx512_rows(a, n_rows, n_tokens);
  gemm_bnb_panels<Nf4Panel>(a, n_rows, n_tokens);
}
void gemm_i8_rows_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  if (n_tokens < kBnbPanelTokens) return gemm_i8_rows_avx512_rows(a, n_rows, n_tokens);
  gemm_bnb_panels<I8RowsPanel>(a, n_rows, n_tokens);
}

}  // namespace ridge::kernels
