// The Q8_0-family GEMM tiles (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1) of gemm/q8_tiles.h built with AVX-VNNI: vpdpbusd does the
// unsigned x signed byte products and their int32 sums in one instruction where AVX2
// needs maddubs + madd. The integers are the same, so results are bit-identical to the
// AVX2 kernels; the avx_vnni table (gemm/table.cpp) runs these.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/quant_blocks.h"
#include "kernels/gemm/table.h"

#pragma GCC target("avx2,fma,f16c,avxvnni")

#include "kernels/gemm/q8_tiles.h"

namespace ridge::kernels {

namespace {

struct DotVnni {
  static __m256i dot(__m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s); }
};

}  // namespace

void gemm_q8_0_avxvnni(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm_blocked<TileQ8Family<DecodeQ8_0, DotVnni>>(a, n_rows, n_tokens);
}
void gemm_q4_0_avxvnni(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm_blocked<TileQ8Family<DecodeQ4_0, DotVnni>>(a, n_rows, n_tokens);
}
void gemm_q5_0_avxvnni(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm_blocked<TileQ8Family<DecodeQ5_0, DotVnni>>(a, n_rows, n_tokens);
}
void gemm_q4_1_avxvnni(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm_blocked<TileQ8Family<DecodeQ4_1, DotVnni>>(a, n_rows, n_tokens);
}
void gemm_q5_1_avxvnni(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm_blocked<TileQ8Family<DecodeQ5_1, DotVnni>>(a, n_rows, n_tokens);
}

}  // namespace ridge::kernels
