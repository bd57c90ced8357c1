// AVX-512 VNNI GEMM over Q4_K_R16 (gemm/repack.h): Q4_K with 16 rows interleaved at load.
//
// A 64-byte load holds 4 qs bytes of each of the 16 rows of a group; its low nibbles
// (and 0x0f) and its high nibbles (and 0xf0: 16 times the nibble, so no shift) each go
// into one vpdpbusd against a broadcast activation dword, advancing 16 row dots at once:
// per 16 rows and 256 elements, 32 loads, 64 ands and 64 vpdpbusd, and no horizontal
// sum. The 12 packed scale bytes of the 16 rows are 3 vectors, unpacked in registers.
// Each group's blocks are one forward stream (prefetched ahead, see kPrefetchAhead).
// Decode (1-3 tokens) runs that; batches of 4 or more unpack each block into the Q4_K
// panel kernels' format and run those (QK4R16 below).
//
// Exactly the arithmetic of vec_dot_q4_k_scalar per (row, token): the exact integer
// sums sumi = sum_s scale_s * dot_s and summ = sum_s min_s * bsum32_s per block, then
// fma(sumi, d * dy) and fma(-summ, dmin * dy) in block order. So outputs are bit-identical
// to the Q4_K reference on the unpacked rows, and a token's result does not depend on its
// batch.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bitalg")
// GCC 12 reports its own AVX-512 intrinsics' _mm512_undefined_*() placeholders as
// "may be used uninitialized" (as in avx512.cpp); the values are always overwritten.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "core/quant_blocks.h"
#include "kernels/gemm/avx512_kquants.h"
#include "kernels/gemm/avx512_panels.h"
#include "kernels/gemm/repack.h"
#include "kernels/gemm/table.h"
#include "kernels/prefetch.h"

namespace ridge::kernels {

namespace {

constexpr size_t kGroupBytes = kRepackRows * sizeof(BlockQ4_K);  // one block of 16 rows
constexpr size_t kGroupScales = 64, kQs = 256;                    // offsets in it (repack.h)
// Each block step asks for the lines of the block group two steps ahead, into L1: the
// hardware prefetcher follows a stream only within a 4 KiB page. From memory at 2
// threads (kernels_benchmark Gemv/q4_K_r16) that read 25-40 GB/s against 19-21 without;
// from L2 the prefetches cost (GemvL2 87 -> 51 GB/s), and decode reads from memory.
constexpr size_t kPrefetchAhead = 2 * kGroupBytes;

// The activation's 32-element sums as the mins multiply them, int16 pairs (s0, s2),
// (s1, s3), (s4, s6), (s5, s7) broadcast: see min_sums.
inline void bsum_pairs(const BlockQ8_K& y, __m512i (&p)[4]) {
  const __m256i s16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
  const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));  // s0..s7, |s| <= 32 * 128
  const __m256i w16 = _mm256_packs_epi32(s32, s32);  // per 128-bit lane: s0 s1 s2 s3 (s4 .. s7) twice
  const __m256i order = _mm256_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 0, 1, 4, 5, 2, 3, 6, 7,  //
                                         0, 1, 4, 5, 2, 3, 6, 7, 0, 1, 4, 5, 2, 3, 6, 7);
  const __m512i q = _mm512_castsi256_si512(_mm256_shuffle_epi8(w16, order));  // (s0,s2) (s1,s3) .. | (s4,s6) (s5,s7)
  p[0] = _mm512_permutexvar_epi32(_mm512_set1_epi32(0), q);
  p[1] = _mm512_permutexvar_epi32(_mm512_set1_epi32(1), q);
  p[2] = _mm512_permutexvar_epi32(_mm512_set1_epi32(4), q);
  p[3] = _mm512_permutexvar_epi32(_mm512_set1_epi32(5), q);
}

// T tokens against one group of 16 rows. Chunks j (64 elements: sub-blocks 2j, 2j + 1)
// run P at a time, so 2 * P * T vpdpbusd chains are in flight (latency, not one chain,
// would bound a single token).
template <int T, int P>
void group_tokens(const GemmArgs& a, const uint8_t* group, int rows, int64_t t0, float* y) {
  const int64_t nb = a.n_in / kQK_K;
  const BlockQ8_K* act[T];
  for (int t = 0; t < T; ++t) act[t] = reinterpret_cast<const BlockQ8_K*>(a.act + (t0 + t) * a.act_stride);
  const __m512i low4 = _mm512_set1_epi8(0x0f), high4 = _mm512_set1_epi8(static_cast<char>(0xf0));
  const __m512i m3f = _mm512_set1_epi32(0x3f3f3f3f), m0f = _mm512_set1_epi32(0x0f0f0f0f),
                m30 = _mm512_set1_epi32(0x30303030), m00ff = _mm512_set1_epi32(0x00ff00ff);
  const __m512i byte = _mm512_set1_epi32(0xff), byte16 = _mm512_set1_epi32(0xff0);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * kGroupBytes;
    for (size_t i = 0; i < kGroupBytes; i += 64) prefetch_l1(blk + kPrefetchAhead + i);
    const __m512i u0 = _mm512_loadu_si512(blk + kGroupScales), u1 = _mm512_loadu_si512(blk + kGroupScales + 64),
                  u2 = _mm512_loadu_si512(blk + kGroupScales + 128);
    // Bytes k of each row's lane: scales k (sc[0]), 4 + k (sc[1]); mins likewise (mn).
    const __m512i sc[2] = {_mm512_and_si512(u0, m3f),
                           _mm512_or_si512(_mm512_and_si512(u2, m0f), _mm512_and_si512(_mm512_srli_epi32(u0, 2), m30))};
    const __m512i mn[2] = {_mm512_and_si512(u1, m3f), _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), m0f),
                                                                      _mm512_and_si512(_mm512_srli_epi32(u1, 2), m30))};
    // isum16 = 16 * sumi: the low-nibble dots times 16 * scale, the high-nibble dots (16
    // times the nibble's) times the scale; |16 * sumi| <= 8 * 16 * 63 * 61440 < 2^31.
    __m512i isum16[T];
    for (int t = 0; t < T; ++t) isum16[t] = _mm512_setzero_si512();
    for (int j0 = 0; j0 < 4; j0 += P) {
      __m512i dlo[P][T], dhi[P][T];
      for (int p = 0; p < P; ++p)
        for (int t = 0; t < T; ++t) dlo[p][t] = dhi[p][t] = _mm512_setzero_si512();
      for (int k = 0; k < 8; ++k)
        for (int p = 0; p < P; ++p) {
          const int j = j0 + p;
          const __m512i w = _mm512_loadu_si512(blk + kQs + 64 * (8 * j + k));
          const __m512i lo = _mm512_and_si512(w, low4), hi = _mm512_and_si512(w, high4);
          for (int t = 0; t < T; ++t) {
            dlo[p][t] = _mm512_dpbusd_epi32(dlo[p][t], lo, bcast32(act[t][b].qs + 64 * j + 4 * k));
            dhi[p][t] = _mm512_dpbusd_epi32(dhi[p][t], hi, bcast32(act[t][b].qs + 64 * j + 32 + 4 * k));
          }
        }
      for (int p = 0; p < P; ++p) {
        const int j = j0 + p;
        // Sub-block 2j: byte 2j % 4 of sc[j / 2], times 16; sub-block 2j + 1: the byte after.
        const __m512i src = sc[j / 2];
        const int shift = 8 * (2 * j % 4);
        const __m512i even16 = _mm512_and_si512(shift == 0 ? _mm512_slli_epi32(src, 4) : _mm512_srli_epi32(src, shift - 4), byte16);
        const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(src, shift + 8), byte);
        for (int t = 0; t < T; ++t)
          isum16[t] = _mm512_add_epi32(isum16[t], _mm512_add_epi32(_mm512_mullo_epi32(dlo[p][t], even16),
                                                                   _mm512_mullo_epi32(dhi[p][t], odd)));
      }
    }
    // summ = sum_s min_s * bsum32_s: int16 pairs of mins (m0, m2), (m1, m3), (m4, m6),
    // (m5, m7) against the activation's pairs.
    const __m512i m_pairs[4] = {_mm512_and_si512(mn[0], m00ff), _mm512_and_si512(_mm512_srli_epi32(mn[0], 8), m00ff),
                                _mm512_and_si512(mn[1], m00ff), _mm512_and_si512(_mm512_srli_epi32(mn[1], 8), m00ff)};
    const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    const __m512 dminv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
    for (int t = 0; t < T; ++t) {
      __m512i pairs[4];
      bsum_pairs(act[t][b], pairs);
      __m512i summ = _mm512_setzero_si512();
      for (int i = 0; i < 4; ++i) summ = _mm512_dpwssd_epi32(summ, m_pairs[i], pairs[i]);
      const __m512 dy = _mm512_set1_ps(act[t][b].d);
      const __m512i sumi = _mm512_srai_epi32(isum16[t], 4);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(dv, dy), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(summ), _mm512_mul_ps(dminv, dy), acc[t]);
    }
  }
  const __mmask16 keep = static_cast<__mmask16>((1u << rows) - 1);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * a.ldy, keep, acc[t]);
}

// Batches of K::kPanelTokens tokens or more (batched decode, prefill) run the Q4_K panel
// kernels of avx512_kquants.h: a group's block is already 16 rows side by side, so
// packing it into their panel is unpacking nibbles and scales, no transpose. The panel
// drivers hand pack_block the 16 row pointers of a panel; the first is the group's
// start (r0 a multiple of 16), and the next group's block b lies where they prefetch it
// (16 rows of 144 bytes per block, as for row-major rows). Decode runs group_tokens.
struct QK4R16 : QK4<false> {
  static constexpr int kRowTile = kRepackRows;
  template <int T>
  static void tile(const GemmArgs& a, int64_t r0, int rows, int64_t t0) {
    constexpr int P = T == 1 ? 4 : T == 2 ? 2 : 1;
    group_tokens<T, P>(a, a.w + r0 * a.w_stride, rows, t0, a.y + t0 * a.ldy + r0);
  }

  static void pack_block(const uint8_t* const (&w)[kPanelRows], int64_t b, uint8_t* dst) {
    const uint8_t* blk = w[0] + b * kGroupBytes;
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int v = 0; v < 32; ++v) {  // dword v: chunk j = v / 8, dword g = v % 8 of sub-blocks 2j, 2j + 1
      const __m512i q = _mm512_loadu_si512(blk + kQs + 64 * v);
      const int j = v / 8, g = v % 8;
      _mm512_store_si512(dst + 64 * (8 * (2 * j) + g), _mm512_and_si512(q, low4));
      _mm512_store_si512(dst + 64 * (8 * (2 * j + 1) + g), _mm512_and_si512(_mm512_srli_epi16(q, 4), low4));
    }
    const __m512i u0 = _mm512_loadu_si512(blk + kGroupScales), u1 = _mm512_loadu_si512(blk + kGroupScales + 64),
                  u2 = _mm512_loadu_si512(blk + kGroupScales + 128);
    const __m512i m3f = _mm512_set1_epi32(0x3f3f3f3f), m0f = _mm512_set1_epi32(0x0f0f0f0f),
                  m30 = _mm512_set1_epi32(0x30303030), byte = _mm512_set1_epi32(0xff);
    const __m512i sm[4] = {  // bytes: scales 0..3, scales 4..7, mins 0..3, mins 4..7
        _mm512_and_si512(u0, m3f),
        _mm512_or_si512(_mm512_and_si512(u2, m0f), _mm512_and_si512(_mm512_srli_epi32(u0, 2), m30)),
        _mm512_and_si512(u1, m3f),
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), m0f), _mm512_and_si512(_mm512_srli_epi32(u1, 2), m30))};
    for (int s = 0; s < 8; ++s) {
      const int shift = 8 * (s % 4);
      _mm512_store_si512(dst + kScales + 64 * s, _mm512_and_si512(_mm512_srli_epi32(sm[s / 4], shift), byte));
      const __m512i m = _mm512_and_si512(_mm512_srli_epi32(sm[2 + s / 4], shift), byte);
      _mm512_store_si512(dst + kMins + 64 * s, _mm512_or_si512(m, _mm512_slli_epi32(m, 16)));
    }
    _mm512_store_ps(dst + kD, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk))));
    _mm512_store_ps(dst + kDmin, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32))));
  }
};

}  // namespace

void gemm_q4_k_r16_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<QK4R16>(a, n_rows, n_tokens); }

}  // namespace ridge::kernels
