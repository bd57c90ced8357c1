// AVX2 quantized GEMM. Weight blocks are unpacked to bytes in registers once per tile
// and multiplied against 8-bit activations with maddubs/madd (unsigned x signed bytes ->
// int16 pairs -> int32 lanes); integer sums are exact, and the float scales are applied
// once per block.
//
// Tiles: a kernel computes R weight rows x T tokens at once, so each unpacked weight block
// serves T tokens. Decode (one token) streams each weight row once. Every (row, token)
// pair's result is defined by one fixed sequence of float operations whatever the tile
// shape, so an output does not depend on the batch it was computed in. The Q8_0-family
// tiles and the tile driver live in gemm/q8_tiles.h (shared with gemm/avx_vnni.cpp); the
// K-quant and 16-bit float tiles are here; the K-quant ones also build with AVX-VNNI
// (vpdpwssd fuses the scale madd and the add, and frees registers for 8 tokens a tile).
//
// The pragma lets this file build without -mavx2; matmul reaches it only after
// best_isa() has checked the CPU.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/quant_blocks.h"
#include "kernels/gemm/table.h"
#include "kernels/prefetch.h"

#pragma GCC target("avx2,fma,f16c")

#include "kernels/gemm/q8_tiles.h"

namespace ridge::kernels {

namespace {
// ---- K-quants against Q8_K activations -----------------------------------------------

// sum + madd(p, s): one group's int16 pair products times its scale, added into the
// int32 lanes. AVX2 needs madd + add; AVX-VNNI's vpdpwssd does both in one instruction
// with the same integers (both wrap mod 2^32), so the bits do not change.
struct ScaleAddAvx2 {
  static constexpr int kTokens = 4;
  static __m256i add(__m256i sum, __m256i p, __m256i s) { return _mm256_add_epi32(sum, _mm256_madd_epi16(p, s)); }
};
struct ScaleAddVnni {
  static constexpr int kTokens = 8;  // sumi[8] + 4 weight/scale vectors stay in registers
  __attribute__((target("avx2,fma,f16c,avxvnni"))) static __m256i add(__m256i sum, __m256i p, __m256i s) {
    return _mm256_dpwssd_avx_epi32(sum, p, s);
  }
};

template <bool kFifthBit, class ScaleAdd = ScaleAddAvx2>
struct TileQ45K {
  static constexpr int kRows = 1, kTokens = ScaleAdd::kTokens, kDecodeRows = 1;
  using Block = std::conditional_t<kFifthBit, BlockQ5_K, BlockQ4_K>;

  template <int R, int T>
  static void run(const GemmArgs& a, int64_t r0, int64_t t0) {
    static_assert(R == 1);
    const int64_t nb = a.n_in / kQK_K;
    const auto* w = reinterpret_cast<const Block*>(a.w + r0 * a.w_stride);
    const BlockQ8_K* y[T];
    for (int t = 0; t < T; ++t) y[t] = reinterpret_cast<const BlockQ8_K*>(a.act + (t0 + t) * a.act_stride);
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();

    for (int64_t b = 0; b < nb; ++b) {
      prefetch_stream_ahead(&w[b], sizeof(Block));
      const Block& blk = w[b];
      __m256i scales, mins;
      unpack_k4_scales(blk.scales, &scales, &mins);
      __m256i sumi[T];
      for (int t = 0; t < T; ++t) sumi[t] = _mm256_setzero_si256();
      [[maybe_unused]] __m256i qh;
      if constexpr (kFifthBit) qh = load256(blk.qh);
      for (int j = 0; j < 4; ++j) {  // 64 elements: group 2j (low nibbles), 2j + 1 (high)
        const __m256i q = load256(blk.qs + 32 * j);
        __m256i lo = _mm256_and_si256(q, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        if constexpr (kFifthBit) {
          const __m256i one = _mm256_set1_epi8(1);
          lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4));
          hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4));
        }
        const __m256i s_lo = broadcast_word(scales, 2 * j);
        const __m256i s_hi = broadcast_word(scales, 2 * j + 1);
        for (int t = 0; t < T; ++t) {
          sumi[t] = ScaleAdd::add(sumi[t], _mm256_maddubs_epi16(lo, load256(y[t][b].qs + 64 * j)), s_lo);
          sumi[t] = ScaleAdd::add(sumi[t], _mm256_maddubs_epi16(hi, load256(y[t][b].qs + 64 * j + 32)), s_hi);
        }
      }
      const float d = f16(reinterpret_cast<const uint8_t*>(&blk.d));
      const float dmin = f16(reinterpret_cast<const uint8_t*>(&blk.dmin));
      for (int t = 0; t < T; ++t) {
        const __m256i summ = _mm256_madd_epi16(load256(y[t][b].bsums), mins);
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * y[t][b].d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
        acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * y[t][b].d), _mm256_cvtepi32_ps(summ), acc[t]);
      }
    }
    for (int t = 0; t < T; ++t) a.y[(t0 + t) * a.ldy + r0] = hsum(acc[t]);
  }
};

template <class ScaleAdd = ScaleAddAvx2>
struct TileQ6K {
  static constexpr int kRows = 1, kTokens = ScaleAdd::kTokens, kDecodeRows = 1;

  template <int R, int T>
  static void run(const GemmArgs& a, int64_t r0, int64_t t0) {
    static_assert(R == 1);
    const int64_t nb = a.n_in / kQK_K;
    const auto* w = reinterpret_cast<const BlockQ6_K*>(a.w + r0 * a.w_stride);
    const BlockQ8_K* y[T];
    for (int t = 0; t < T; ++t) y[t] = reinterpret_cast<const BlockQ8_K*>(a.act + (t0 + t) * a.act_stride);
    const __m256i low4 = _mm256_set1_epi8(0x0f), low2 = _mm256_set1_epi8(0x03);
    // Within each 128-bit lane: int16 lane 0 to the low half's 8 lanes, lane 1 to the high.
    const __m256i pair = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
                                          2, 3, 2, 3, 2, 3);
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();

    for (int64_t b = 0; b < nb; ++b) {
      prefetch_stream_ahead(&w[b], sizeof(BlockQ6_K));
      const BlockQ6_K& blk = w[b];
      const __m256i scales = _mm256_cvtepi8_epi16(load128(blk.scales));  // 16 groups of 16
      __m256i sumi[T];
      for (int t = 0; t < T; ++t) sumi[t] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        const __m256i ql0 = load256(blk.ql + 64 * h);
        const __m256i ql1 = load256(blk.ql + 64 * h + 32);
        const __m256i qh = load256(blk.qh + 32 * h);
        for (int k = 0; k < 4; ++k) {  // 32 elements 128h + 32k + l: groups 2c, 2c + 1
          const int c = 4 * h + k;
          const __m256i src = (k % 2 == 0) ? ql0 : ql1;
          const __m256i low = _mm256_and_si256(k < 2 ? src : _mm256_srli_epi16(src, 4), low4);
          const __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), low2), 4);
          const __m256i q = _mm256_or_si256(low, high);
          const __m256i s = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(scales, _mm256_set1_epi32(c)), pair);
          for (int t = 0; t < T; ++t)
            sumi[t] = ScaleAdd::add(sumi[t], _mm256_maddubs_epi16(q, load256(y[t][b].qs + 32 * c)), s);
        }
      }
      const float d = f16(reinterpret_cast<const uint8_t*>(&blk.d));
      for (int t = 0; t < T; ++t) {
        // q - 32: subtract 32 * sum_g scale_g * bsum_g.
        const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(load256(y[t][b].bsums), scales), 5);
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * y[t][b].d), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[t], offset)),
                                 acc[t]);
      }
    }
    for (int t = 0; t < T; ++t) a.y[(t0 + t) * a.ldy + r0] = hsum(acc[t]);
  }
};

// ---- float weights (f32, and f16/bf16 widened in registers) against f32 activations ---

struct LoadF32 {
  using Elem = float;
  static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static float one(float v) { return v; }
};

struct LoadF16 {
  using Elem = uint16_t;
  static __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(load128(p)); }
  static float one(uint16_t h) { return _cvtsh_ss(h); }
};

struct LoadBF16 {
  using Elem = uint16_t;
  static __m256 load8(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
  }
  static float one(uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  }
};

template <class Load>
struct TileFloat {
  static constexpr int kRows = 4, kTokens = 2, kDecodeRows = 4;

  template <int R, int T>
  static void run(const GemmArgs& a, int64_t r0, int64_t t0) {
    const int64_t n = a.n_in, n8 = n / 8 * 8;
    const typename Load::Elem* w[R];
    for (int r = 0; r < R; ++r) w[r] = reinterpret_cast<const typename Load::Elem*>(a.w + (r0 + r) * a.w_stride);
    const float* x[T];
    for (int t = 0; t < T; ++t) x[t] = reinterpret_cast<const float*>(a.act + (t0 + t) * a.act_stride);
    __m256 acc[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    // The next tile's rows, a line of each per 64 bytes read.
    constexpr int64_t kLineElems = 64 / static_cast<int64_t>(sizeof(typename Load::Elem));
    const uint8_t* next = a.w + (r0 + R) * a.w_stride;
    for (int64_t i = 0; i < n8; i += 8) {
      if (i % kLineElems == 0) prefetch_rows_l1(next, a.w_stride, R, i * sizeof(typename Load::Elem));
      __m256 wv[R];
      for (int r = 0; r < R; ++r) wv[r] = Load::load8(w[r] + i);
      for (int t = 0; t < T; ++t) {
        const __m256 xv = _mm256_loadu_ps(x[t] + i);
        for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
      }
    }
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) {
        float sum = hsum(acc[r][t]);
        for (int64_t i = n8; i < n; ++i) sum += Load::one(w[r][i]) * x[t][i];
        a.y[(t0 + t) * a.ldy + r0 + r] = sum;
      }
  }
};

}  // namespace

void quantize_act_q8_0_avx2(const float* x, uint8_t* dst, int64_t n_in) {
  auto* q = reinterpret_cast<int8_t*>(dst);
  auto* scale = reinterpret_cast<float*>(dst + n_in);
  auto* sums = reinterpret_cast<int32_t*>(scale + n_in / 32);
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < n_in / 32; ++b) {
    const float d = abs_max(x + 32 * b, 32) / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const __m256i qb = quantize32(x + 32 * b, _mm256_set1_ps(id));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), qb);
    scale[b] = d;
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, qb), ones16);
    const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    const __m128i s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    sums[b] = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1)));
  }
}

void quantize_act_q8_k_avx2(const float* x, uint8_t* dst, int64_t n_in) {
  auto* blocks = reinterpret_cast<BlockQ8_K*>(dst);
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < n_in / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    BlockQ8_K& block = blocks[b];
    const float d = abs_max(xb, kQK_K) / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    block.d = d;
    for (int c = 0; c < kQK_K / 32; ++c) {
      const __m256i q = quantize32(xb + 32 * c, _mm256_set1_ps(id));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(block.qs + 32 * c), q);
      // Sums of the two 16-element groups: lanes 0..3 and 4..7 after maddubs + madd.
      const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
      const __m256i h = _mm256_hadd_epi32(s, s);
      const __m256i h2 = _mm256_hadd_epi32(h, h);
      block.bsums[2 * c] = static_cast<int16_t>(_mm256_extract_epi32(h2, 0));
      block.bsums[2 * c + 1] = static_cast<int16_t>(_mm256_extract_epi32(h2, 4));
    }
  }
}

void gemm_q8_0_avx2(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm_blocked<TileQ8Family<DecodeQ8_0, DotMaddubs>>(a, n_rows, n_tokens);
}
void gemm_q4_0_avx2(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm_blocked<TileQ8Family<DecodeQ4_0, DotMaddubs>>(a, n_rows, n_tokens);
}
void gemm_q5_0_avx2(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm_blocked<TileQ8Family<DecodeQ5_0, DotMaddubs>>(a, n_rows, n_tokens);
}
void gemm_q4_1_avx2(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm_blocked<TileQ8Family<DecodeQ4_1, DotMaddubs>>(a, n_rows, n_tokens);
}
void gemm_q5_1_avx2(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm_blocked<TileQ8Family<DecodeQ5_1, DotMaddubs>>(a, n_rows, n_tokens);
}
void gemm_q4_k_avx2(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm_blocked<TileQ45K<false>>(a, n_rows, n_tokens);
}
void gemm_q5_k_avx2(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm_blocked<TileQ45K<true>>(a, n_rows, n_tokens);
}
void gemm_q6_k_avx2(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm_blocked<TileQ6K<>>(a, n_rows, n_tokens); }

// The K-quant tiles with vpdpwssd. flatten inlines the whole driver and tiles into these
// AVX-VNNI functions, so the (AVX2-declared) helpers compile with VNNI enabled.
#define RIDGE_VNNI_ENTRY __attribute__((target("avx2,fma,f16c,avxvnni"), flatten))
RIDGE_VNNI_ENTRY void gemm_q4_k_avxvnni(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm_blocked<TileQ45K<false, ScaleAddVnni>>(a, n_rows, n_tokens);
}
RIDGE_VNNI_ENTRY void gemm_q5_k_avxvnni(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm_blocked<TileQ45K<true, ScaleAddVnni>>(a, n_rows, n_tokens);
}
RIDGE_VNNI_ENTRY void gemm_q6_k_avxvnni(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm_blocked<TileQ6K<ScaleAddVnni>>(a, n_rows, n_tokens);
}
#undef RIDGE_VNNI_ENTRY
void gemm_f32_avx2(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm_blocked<TileFloat<LoadF32>>(a, n_rows, n_tokens);
}
void gemm_f16_avx2(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm_blocked<TileFloat<LoadF16>>(a, n_rows, n_tokens);
}
void gemm_bf16_avx2(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm_blocked<TileFloat<LoadBF16>>(a, n_rows, n_tokens);
}

}  // namespace ridge::kernels
