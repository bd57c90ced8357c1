// The 32-element block types (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1) against Q8_0 activations, the tile
// driver every AVX2 quantized GEMM uses, and K-quant scale helpers. Included by
// gemm/avx2.cpp, gemm/avx_vnni.cpp and gemm/avx512.cpp after each sets its target ISA, so
// the same source builds once with maddubs + madd and once with VNNI's vpdpbusd.
// Internal to those files.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/quant_blocks.h"
#include "kernels/avx2_math.h"
#include "kernels/gemm/table.h"
#include "kernels/prefetch.h"

namespace ridge::kernels {
namespace {

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return _cvtsh_ss(h);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// 32 bytes: 0xFF where bit j of `bits` is set, else 0.
inline __m256i bytes_from_bits(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// Rounds 32 floats * id to int8 (round half even), in element order.
inline __m256i quantize32(const float* x, __m256 id) {
  const auto q = [&](int i) {
    return _mm256_cvtps_epi32(
        _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  };
  // packs interleave 128-bit lanes; the permute puts the dwords back in order.
  const __m256i p01 = _mm256_packs_epi32(q(0), q(1));
  const __m256i p23 = _mm256_packs_epi32(q(2), q(3));
  const __m256i bytes = _mm256_packs_epi16(p01, p23);
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline float abs_max(const float* x, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  return hmax(m);
}

// The 8 six-bit scales (bytes 0..7) and 8 mins (bytes 8..15) of a Q4_K/Q5_K block.
inline __m128i scales_mins_k4(const uint8_t* packed) {
  uint32_t u[3];
  std::memcpy(u, packed, sizeof(u));
  const uint32_t s_lo = u[0] & 0x3f3f3f3fu, m_lo = u[1] & 0x3f3f3f3fu;
  const uint32_t s_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u);
  const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u);
  return _mm_setr_epi32(static_cast<int>(s_lo), static_cast<int>(s_hi), static_cast<int>(m_lo), static_cast<int>(m_hi));
}

// The 8 scales as int16 in both 128-bit lanes, and the 8 mins each twice (16 int16,
// matching the 16 bsums) of a Q4_K/Q5_K block.
inline void unpack_k4_scales(const uint8_t* packed, __m256i* scales, __m256i* mins_twice) {
  const __m128i sm = scales_mins_k4(packed);
  const __m128i m8 = _mm_srli_si128(sm, 8);
  *scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
  *mins_twice = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
}

// Broadcasts int16 lane g (within each 128-bit lane) to all int16 lanes.
inline __m256i broadcast_word(__m256i v, int g) {
  const char lo = static_cast<char>(2 * g), hi = static_cast<char>(2 * g + 1);
  return _mm256_shuffle_epi8(v, _mm256_setr_epi8(lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo,
                                                  hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi));
}

// ---- tile driver ---------------------------------------------------------------------

// Calls K::run<R', T'> for the largest R' <= R, T' <= T matching a partial tile.
template <class K, int R, int T>
inline void run_tile(const GemmArgs& a, int64_t r0, int rows, int64_t t0, int tokens) {
  if constexpr (R > 1) {
    if (rows < R) return run_tile<K, R - 1, T>(a, r0, rows, t0, tokens);
  }
  if constexpr (T > 1) {
    if (tokens < T) return run_tile<K, R, T - 1>(a, r0, rows, t0, tokens);
  }
  K::template run<R, T>(a, r0, t0);
}

// Decode: R-row strips over all rows. Batches: token chunks that stay in L2, row panels
// that stay in L1/L2, and R x T tiles inside.
template <class K>
void gemm_blocked(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  if (n_tokens == 1) {
    for (int64_t r0 = 0; r0 < n_rows; r0 += K::kDecodeRows)
      run_tile<K, K::kDecodeRows, 1>(a, r0, static_cast<int>(std::min<int64_t>(K::kDecodeRows, n_rows - r0)), 0, 1);
    return;
  }
  constexpr int64_t kTokenChunk = 64, kRowPanel = 16;
  for (int64_t tc0 = 0; tc0 < n_tokens; tc0 += kTokenChunk) {
    const int64_t tc1 = std::min(n_tokens, tc0 + kTokenChunk);
    for (int64_t rp0 = 0; rp0 < n_rows; rp0 += kRowPanel) {
      const int64_t rp1 = std::min(n_rows, rp0 + kRowPanel);
      for (int64_t t0 = tc0; t0 < tc1; t0 += K::kTokens) {
        const int tokens = static_cast<int>(std::min<int64_t>(K::kTokens, tc1 - t0));
        for (int64_t r0 = rp0; r0 < rp1; r0 += K::kRows)
          run_tile<K, K::kRows, K::kTokens>(a, r0, static_cast<int>(std::min<int64_t>(K::kRows, rp1 - r0)), t0,
                                            tokens);
      }
    }
  }
}

// ---- 32-element block types against Q8_0 activations --------------------------------

// Each weight decoder turns one block into 32 bytes in element order, every block
// starting with its f16 scale. Q8_0 gives signed values (kShift 0: the sign trick);
// Q4_0 and Q5_0 give unsigned q with value q - 2^kShift, the offset taken off through
// the activation block sums. Q4_1 and Q5_1 (kMin) give unsigned q with value d * q + m:
// their f16 min follows the scale, and m * sum(y) comes in through the block sums.
struct DecodeQ8_0 {
  static constexpr size_t kBytes = sizeof(BlockQ8_0);
  static constexpr int kShift = 0;
  static constexpr bool kMin = false;
  static __m256i load(const uint8_t* b) { return load256(b + 2); }
};

struct DecodeQ4_0 {
  static constexpr size_t kBytes = sizeof(BlockQ4_0);
  static constexpr int kShift = 3;  // q - 8
  static constexpr bool kMin = false;
  static __m256i load(const uint8_t* b) {
    const __m128i packed = load128(b + 2);  // element l low nibble, l + 16 high nibble
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(0x0f));
  }
};

struct DecodeQ5_0 {
  static constexpr size_t kBytes = sizeof(BlockQ5_0);
  static constexpr int kShift = 4;  // q - 16
  static constexpr bool kMin = false;
  static __m256i load(const uint8_t* b) {
    uint32_t qh;
    std::memcpy(&qh, b + 2, sizeof(qh));
    const __m128i packed = load128(b + 6);
    const __m256i nibbles =
        _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(0x0f));
    return _mm256_or_si256(nibbles, _mm256_and_si256(bytes_from_bits(qh), _mm256_set1_epi8(0x10)));
  }
};

struct DecodeQ4_1 {
  static constexpr size_t kBytes = sizeof(BlockQ4_1);
  static constexpr int kShift = 0;
  static constexpr bool kMin = true;  // f16 m at byte 2
  static __m256i load(const uint8_t* b) {
    const __m128i packed = load128(b + 4);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(0x0f));
  }
};

struct DecodeQ5_1 {
  static constexpr size_t kBytes = sizeof(BlockQ5_1);
  static constexpr int kShift = 0;
  static constexpr bool kMin = true;
  static __m256i load(const uint8_t* b) {
    uint32_t qh;
    std::memcpy(&qh, b + 4, sizeof(qh));
    const __m128i packed = load128(b + 8);
    const __m256i nibbles =
        _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(0x0f));
    return _mm256_or_si256(nibbles, _mm256_and_si256(bytes_from_bits(qh), _mm256_set1_epi8(0x10)));
  }
};

inline uint16_t f16_bits(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return h;
}

// The f16 at byte `off` of 8 consecutive blocks `bytes` apart, as floats.
inline __m256 f16_blocks8(const uint8_t* blk, size_t bytes, size_t off) {
  const uint8_t* p = blk + off;
  return _mm256_cvtph_ps(_mm_setr_epi16(
      static_cast<short>(f16_bits(p)), static_cast<short>(f16_bits(p + bytes)),
      static_cast<short>(f16_bits(p + 2 * bytes)), static_cast<short>(f16_bits(p + 3 * bytes)),
      static_cast<short>(f16_bits(p + 4 * bytes)), static_cast<short>(f16_bits(p + 5 * bytes)),
      static_cast<short>(f16_bits(p + 6 * bytes)), static_cast<short>(f16_bits(p + 7 * bytes))));
}

// Integer dot of a decoded weight block with an activation block: 8 int32 lanes whose
// sum is exact. Signed weights: |w| * (y with w's sign), the unsigned x signed form
// maddubs needs; unsigned weights go in as they are (the offset comes later).
// Dot is the unsigned x signed byte product summed into int32 lanes: DotMaddubs
// (maddubs + madd, AVX2) or DotVnni (vpdpbusd, AVX-VNNI, in gemm/avx_vnni.cpp). In our
// ranges maddubs never saturates, so both give the same integers.
struct DotMaddubs {
  static __m256i dot(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
  }
};

template <class Decode, class Dot>
inline __m256i block_dot(__m256i wq, __m256i y) {
  if constexpr (Decode::kShift == 0 && !Decode::kMin)
    return Dot::dot(_mm256_abs_epi8(wq), _mm256_sign_epi8(y, wq));
  else
    return Dot::dot(wq, y);
}

// The 8 lane sums of p[0..7] as one vector: [sum p0, ..., sum p7] (exact integers).
inline __m256i sum_lanes8(const __m256i (&p)[8]) {
  const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
  const __m256i q0 = _mm256_hadd_epi32(h01, h23), q1 = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(q0, q1, 0x20), _mm256_permute2x128_si256(q0, q1, 0x31));
}

// Whether block dots can be added in int16 before one madd widens them: weights of at
// most 5 unsigned bits (Q4_0, Q5_0, Q4_1, Q5_1) against activations in [-127, 127] give
// maddubs pair sums of at most 2 * 31 * 127 = 7874, so four of them (two hadd_epi16
// levels) stay within 31496 < 2^15. Q8_0's |w| reaches 128 and would overflow;
// vpdpbusd has no madd to save.
template <class Decode, class Dot>
inline constexpr bool kInt16BlockSums = std::is_same_v<Dot, DotMaddubs> && (Decode::kShift > 0 || Decode::kMin);

// The exact dots of 8 (weight block, activation block) pairs as one vector, lane k the
// dot of pair k: block_dot per pair and sum_lanes8, or, where kInt16BlockSums holds, the
// maddubs products summed pairwise twice in int16 (hadd_epi16: per 128-bit lane, 2
// words for each of 4 pairs) and widened by one madd per 4 pairs. The integers are the
// same either way; the int16 form issues 2 of the 8 madds and the same number of
// shuffles, which matters where the vector multiplier is the bottleneck (AVX2 on Zen 3
// issues one integer multiply a cycle).
template <class Decode, class Dot>
inline __m256i block_dots8(const __m256i (&w)[8], const __m256i (&y)[8]) {
  if constexpr (kInt16BlockSums<Decode, Dot>) {
    __m256i m[8];
    for (int k = 0; k < 8; ++k) m[k] = _mm256_maddubs_epi16(w[k], y[k]);
    const __m256i ones = _mm256_set1_epi16(1);
    const auto four = [&](int k) {  // per 128-bit lane: [k, k + 1, k + 2, k + 3] partial sums
      return _mm256_madd_epi16(
          _mm256_hadd_epi16(_mm256_hadd_epi16(m[k], m[k + 1]), _mm256_hadd_epi16(m[k + 2], m[k + 3])), ones);
    };
    const __m256i lo = four(0), hi = four(4);
    return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
  } else {
    __m256i p[8];
    for (int k = 0; k < 8; ++k) p[k] = block_dot<Decode, Dot>(w[k], y[k]);
    return sum_lanes8(p);
  }
}

// Exact block dots from the raw ones: subtract 2^kShift * (activation block sum).
template <class Decode>
inline __m256i offset(__m256i dots, __m256i sums) {
  if constexpr (Decode::kShift == 0) return dots;
  else return _mm256_sub_epi32(dots, _mm256_slli_epi32(sums, Decode::kShift));
}

// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)), lane-wise: the order hsum() adds
// the 8 lanes of one vector in.
inline __m256 tree_sum8(const __m256 (&a)[8]) {
  return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6])),
                       _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7])));
}

// 32-element block types against Q8_0 activations. For each (row, token) pair the
// result is defined as: s_b = the exact integer dot of block b, c_b = d_w(b) * d_y(b),
// acc_j = fma(s_b, c_b, acc_j) over blocks b = j mod 8 in order (kMin: then
// acc_j = fma(sum_y(b), m_w(b) * d_y(b), acc_j)), and the 8 acc_j summed as tree_sum8 does. Decode (one token) holds acc_j in lane j and handles 8 blocks per
// step; batches hold tokens in lanes (8 at once) with one vector per j. Both compute
// exactly that, so the bits do not depend on the batch. Per (block, token) the cost is
// a maddubs (Q8_0: with sign and abs) and about one op of the lane-sum tree, plus a madd
// (a quarter of one for the 4/5-bit types: block_dots8); the float work is per 8.
template <class Decode, class Dot>
struct TileQ8Family {
  static constexpr int kRows = 1, kTokens = 8, kDecodeRows = 1;

  template <int R, int T>
  static void run(const GemmArgs& a, int64_t r0, int64_t t0) {
    static_assert(R == 1);
    if constexpr (T == 1) {
      decode(a, r0, t0);
    } else {
      if (a.scales_t == nullptr || a.sums_t == nullptr) {  // no tables: one token at a time, same bits
        for (int t = 0; t < T; ++t) decode(a, r0, t0 + t);
        return;
      }
      batch<T>(a, r0, t0);
    }
  }

  static void decode(const GemmArgs& a, int64_t r, int64_t t) {
    const int64_t nb = a.n_in / 32;
    const uint8_t* w = a.w + r * a.w_stride;
    const uint8_t* row = a.act + t * a.act_stride;
    const auto* yq = reinterpret_cast<const int8_t*>(row);
    const auto* yd = reinterpret_cast<const float*>(row + a.n_in);
    const auto* ys = reinterpret_cast<const int32_t*>(yd + nb);
    __m256 acc = _mm256_setzero_ps();
    int64_t b0 = 0;
    for (; b0 + 8 <= nb; b0 += 8) {  // whole groups of 8 blocks: no branches, all in registers
      const uint8_t* blk = w + b0 * Decode::kBytes;
      prefetch_stream_ahead(blk, 8 * Decode::kBytes);
      __m256i wq[8], y[8];
      for (int k = 0; k < 8; ++k) {
        wq[k] = Decode::load(blk + k * Decode::kBytes);
        y[k] = load256(yq + 32 * (b0 + k));
      }
      const __m256 dy = _mm256_loadu_ps(yd + b0);
      const __m256 c = _mm256_mul_ps(f16_blocks8(blk, Decode::kBytes, 0), dy);
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(offset<Decode>(block_dots8<Decode, Dot>(wq, y), load256(ys + b0))), c,
                            acc);
      if constexpr (Decode::kMin)
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(load256(ys + b0)),
                              _mm256_mul_ps(f16_blocks8(blk, Decode::kBytes, 2), dy), acc);
    }
    if (b0 < nb) {  // the last partial group: missing blocks add 0 * 0
      const int n = static_cast<int>(nb - b0);
      __m256i p[8];
      alignas(16) uint16_t dw[8] = {}, mw[8] = {};
      alignas(32) float dy[8] = {};
      alignas(32) int32_t sy[8] = {};
      for (int k = 0; k < 8; ++k) {
        if (k < n) {
          const uint8_t* blk = w + (b0 + k) * Decode::kBytes;
          p[k] = block_dot<Decode, Dot>(Decode::load(blk), load256(yq + 32 * (b0 + k)));
          dw[k] = f16_bits(blk);
          if constexpr (Decode::kMin) mw[k] = f16_bits(blk + 2);
          dy[k] = yd[b0 + k];
          sy[k] = ys[b0 + k];
        } else {
          p[k] = _mm256_setzero_si256();
        }
      }
      const __m256 c = _mm256_mul_ps(_mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dw))),
                                     _mm256_load_ps(dy));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(offset<Decode>(sum_lanes8(p), load256(sy))), c, acc);
      if constexpr (Decode::kMin) {
        const __m256 cm = _mm256_mul_ps(_mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(mw))),
                                        _mm256_load_ps(dy));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(load256(sy)), cm, acc);
      }
    }
    a.y[t * a.ldy + r] = hsum(acc);
  }

  template <int T>
  static void batch(const GemmArgs& a, int64_t r, int64_t t0) {
    const int64_t nb = a.n_in / 32;
    const uint8_t* w = a.w + r * a.w_stride;
    const int8_t* yq[T];
    for (int t = 0; t < T; ++t) yq[t] = reinterpret_cast<const int8_t*>(a.act + (t0 + t) * a.act_stride);
    __m256 acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
      for (int j = 0; j < 8; ++j) {  // block b0 + j goes to acc[j]
        const int64_t b = b0 + j;
        if (b >= nb) break;
        const uint8_t* blk = w + b * Decode::kBytes;
        prefetch_l1(blk + 512);
        const __m256i wb = Decode::load(blk);
        __m256i wq[8], y[8];  // one weight block against 8 tokens (zero past T)
        for (int t = 0; t < 8; ++t) {
          wq[t] = wb;
          y[t] = t < T ? load256(yq[t] + 32 * b) : _mm256_setzero_si256();
        }
        // Lanes past T hold the next tokens' (or padding) scales; their results are dropped.
        const __m256 dy = _mm256_loadu_ps(a.scales_t + b * a.scales_t_stride + t0);
        const __m256i sy = load256(a.sums_t + b * a.scales_t_stride + t0);
        const __m256 c = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(f16_bits(blk))), dy);
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(offset<Decode>(block_dots8<Decode, Dot>(wq, y), sy)), c, acc[j]);
        if constexpr (Decode::kMin)
          acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sy), _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(f16_bits(blk + 2))), dy),
                                   acc[j]);
      }
    }
    alignas(32) float out[8];
    _mm256_store_ps(out, tree_sum8(acc));
    for (int t = 0; t < T; ++t) a.y[(t0 + t) * a.ldy + r] = out[t];
  }
};

}  // namespace
}  // namespace ridge::kernels
