// AVX-512 VNNI integer GEMM for the runtime weight formats NF4 and I8_ROWS
// (core/quant_bnb.h) against Q8_0 activations, bit-identical to vec_dot_nf4_scalar /
// vec_dot_i8_rows_scalar. The avx512_vnni table (gemm/table.cpp) runs these.
//
// One vpdpbusd multiplies 64 weight bytes of a row (two 32-element groups, in element
// order) by 64 activation bytes. vpdpbusd wants unsigned weights, so they go in as
// w + 128 (NF4: a shifted lookup table; I8_ROWS: the sign bit flipped) and 128 * (the
// activation group's stored sum) comes off afterwards: exact integers. A tile is 4 rows
// x up to 4 tokens with the rows in the lanes of the float accumulators, each lane
// running its row's scalar sequence (one fma per group, in group order).
//
// These row-major forms suit decode (a token or a few); gemm_nf4_avx512 and
// gemm_i8_rows_avx512 (gemm/avx512.cpp) take them below kBnbPanelTokens tokens and pack
// 16-row panels for more.
//
//   gemm_nf4_avx512_rows({n_in, w, row_size(DType::NF4, n_in), act, act_stride, y, ldy}, n_rows, n_tokens);
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "core/quant_bnb.h"
#include "kernels/gemm/table.h"

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
// GCC 12 reports its own AVX-512 intrinsics' _mm512_undefined_*() placeholders as
// "may be used uninitialized"; the values are always overwritten.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/gemm/q8_tiles.h"  // load256, load128

namespace ridge::kernels {

namespace {

constexpr int kRows = 4;    // weight rows per tile: the lanes of one __m128
constexpr int kTokens = 4;  // tokens per pass over a tile's rows (they stay in L1)

// The weights of a 64-element step (groups 2k, 2k + 1) of one row as w + 128, and each
// row's float factors. Every format provides:
//   Row row(const uint8_t* bytes, int64_t n);
//   __m512i step(const Row&, int64_t k);
//   __m128 step_scale(const Row (&)[kRows], int64_t k);  // per-row factor of d_act[g]
//   __m128 row_scale(const Row (&)[kRows]);               // applied once at the end
// A factor of 1.0f is exact, so both formats share one sequence of float operations.
struct Nf4 {
  static constexpr bool kHalfSteps = false;  // n is a multiple of 64
  struct Row {
    Nf4Row nf4;
  };
  __m512i table = _mm512_broadcast_i32x4(
      _mm_xor_si128(load128(nf4_values_i8().data()), _mm_set1_epi8(static_cast<char>(0x80))));  // w + 128
  const std::array<float, 256>& map = dynamic_map();

  Row row(const uint8_t* bytes, int64_t n) const { return {nf4_row(bytes, n)}; }
  __m512i step(const Row& r, int64_t b) const {
    // Byte l holds element l (low nibble) and l + 32 (high): low nibbles to the low
    // 32 bytes, high nibbles to the high 32.
    const __m512i both = _mm512_broadcast_i64x4(load256(r.nf4.qs + 32 * b));
    const __m512i nibbles = _mm512_and_si512(_mm512_srlv_epi64(both, _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4)),
                                             _mm512_set1_epi8(0x0f));
    return _mm512_shuffle_epi8(table, nibbles);
  }
  // absmax_b * (1 / 127): fma(map[code], absmax2, offset) as nf4_absmax computes it.
  __m128 step_scale(const Row (&r)[kRows], int64_t b) const {
    const __m128 absmax = _mm_fmadd_ps(
        _mm_setr_ps(map[r[0].nf4.codes[b]], map[r[1].nf4.codes[b]], map[r[2].nf4.codes[b]], map[r[3].nf4.codes[b]]),
        _mm_setr_ps(r[0].nf4.absmax2, r[1].nf4.absmax2, r[2].nf4.absmax2, r[3].nf4.absmax2),
        _mm_setr_ps(r[0].nf4.offset, r[1].nf4.offset, r[2].nf4.offset, r[3].nf4.offset));
    return _mm_mul_ps(absmax, _mm_set1_ps(1.0f / 127.0f));
  }
  __m128 row_scale(const Row (&)[kRows]) const { return _mm_set1_ps(1.0f); }
};

struct I8Rows {
  static constexpr bool kHalfSteps = true;  // n is a multiple of 32: a last lone group
  struct Row {
    float scale;
    const int8_t* q;
  };
  Row row(const uint8_t* bytes, int64_t) const {
    Row r;
    std::memcpy(&r.scale, bytes, sizeof(float));
    r.q = reinterpret_cast<const int8_t*>(bytes + sizeof(float));
    return r;
  }
  __m512i step(const Row& r, int64_t k) const {
    return _mm512_xor_si512(_mm512_loadu_si512(r.q + 64 * k), _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  // Group g alone in the low 32 bytes (the high 32 pair with zero activations).
  __m512i last_group(const Row& r, int64_t g) const {
    return _mm512_xor_si512(_mm512_zextsi256_si512(load256(r.q + 32 * g)), _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  __m128 step_scale(const Row (&)[kRows], int64_t) const { return _mm_set1_ps(1.0f); }
  __m128 row_scale(const Row (&r)[kRows]) const { return _mm_setr_ps(r[0].scale, r[1].scale, r[2].scale, r[3].scale); }
};

// p[r]: 16 int32 lanes of row r, lanes 0..7 summing to group 2k, 8..15 to group 2k + 1.
// Returns [rows 0..3 of group 2k | rows 0..3 of group 2k + 1] (exact integer sums).
inline __m256i sum_rows4x2(const __m512i (&p)[kRows]) {
  const __m512i t01 = _mm512_add_epi32(_mm512_unpacklo_epi32(p[0], p[1]), _mm512_unpackhi_epi32(p[0], p[1]));
  const __m512i t23 = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2], p[3]), _mm512_unpackhi_epi32(p[2], p[3]));
  // Each 128-bit lane j: [row 0, row 1, row 2, row 3] sums of that lane's 4 dwords.
  const __m512i lanes = _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
  const __m512i pairs = _mm512_shuffle_i64x2(lanes, lanes, _MM_SHUFFLE(3, 1, 2, 0));  // lanes 0, 2, 1, 3
  return _mm256_add_epi32(_mm512_castsi512_si256(pairs), _mm512_extracti64x4_epi64(pairs, 1));
}

// Rows r0..r0+rows-1 (rows <= 4; missing rows repeat the last and are not stored)
// against tokens t0..t0+T-1.
template <class F, int T>
void tile(const F& f, const GemmArgs& a, int64_t r0, int rows, int64_t t0) {
  const int64_t n_groups = a.n_in / 32;
  typename F::Row w[kRows];
  for (int r = 0; r < kRows; ++r) w[r] = f.row(a.w + (r0 + std::min(r, rows - 1)) * a.w_stride, a.n_in);
  const int8_t* yq[T];
  const float* yd[T];
  const int32_t* ys[T];
  __m128 acc[T];
  for (int t = 0; t < T; ++t) {
    const uint8_t* row = a.act + (t0 + t) * a.act_stride;
    yq[t] = reinterpret_cast<const int8_t*>(row);
    yd[t] = reinterpret_cast<const float*>(row + a.n_in);
    ys[t] = reinterpret_cast<const int32_t*>(yd[t] + n_groups);
    acc[t] = _mm_setzero_ps();
  }
  // The next tile's rows, a line of each per step at the step's share of the row.
  const int64_t n_steps = n_groups / 2;
  const size_t step_bytes = n_steps > 0 ? (a.w_stride + n_steps - 1) / n_steps : 0;
  const uint8_t* next = a.w + (r0 + kRows) * a.w_stride;
  for (int64_t k = 0; k < n_steps; ++k) {
    prefetch_rows_l1(next, a.w_stride, kRows, k * step_bytes);
    __m512i wu[kRows];
    for (int r = 0; r < kRows; ++r) wu[r] = f.step(w[r], k);
    const __m128 c = f.step_scale(w, k);
    for (int t = 0; t < T; ++t) {
      const __m512i y = _mm512_loadu_si512(yq[t] + 64 * k);
      __m512i p[kRows];
      for (int r = 0; r < kRows; ++r) p[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wu[r], y);
      const __m256i bias = _mm256_setr_m128i(_mm_set1_epi32(ys[t][2 * k]), _mm_set1_epi32(ys[t][2 * k + 1]));
      const __m256 s = _mm256_cvtepi32_ps(_mm256_sub_epi32(sum_rows4x2(p), _mm256_slli_epi32(bias, 7)));
      acc[t] = _mm_fmadd_ps(_mm256_castps256_ps128(s), _mm_mul_ps(c, _mm_set1_ps(yd[t][2 * k])), acc[t]);
      acc[t] = _mm_fmadd_ps(_mm256_extractf128_ps(s, 1), _mm_mul_ps(c, _mm_set1_ps(yd[t][2 * k + 1])), acc[t]);
    }
  }
  if constexpr (F::kHalfSteps) {
    if (n_groups % 2 != 0) {  // the last group alone (I8_ROWS, scale factor 1)
      const int64_t g = n_groups - 1;
      __m512i wu[kRows];
      for (int r = 0; r < kRows; ++r) wu[r] = f.last_group(w[r], g);
      for (int t = 0; t < T; ++t) {
        const __m512i y = _mm512_zextsi256_si512(load256(yq[t] + 32 * g));
        __m512i p[kRows];
        for (int r = 0; r < kRows; ++r) p[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wu[r], y);
        const __m128i s = _mm_sub_epi32(_mm256_castsi256_si128(sum_rows4x2(p)), _mm_set1_epi32(ys[t][g] * 128));
        acc[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(s), _mm_set1_ps(yd[t][g]), acc[t]);
      }
    }
  }
  const __m128 scale = f.row_scale(w);
  for (int t = 0; t < T; ++t)
    _mm_mask_storeu_ps(a.y + (t0 + t) * a.ldy + r0, static_cast<__mmask8>((1u << rows) - 1), _mm_mul_ps(acc[t], scale));
}

template <class F, int T = kTokens>
void tile_tokens(const F& f, const GemmArgs& a, int64_t r0, int rows, int64_t t0, int tokens) {
  if constexpr (T > 1) {
    if (tokens < T) return tile_tokens<F, T - 1>(f, a, r0, rows, t0, tokens);
  }
  tile<F, T>(f, a, r0, rows, t0);
}

template <class F>
void gemm(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  const F f{};
  for (int64_t r0 = 0; r0 < n_rows; r0 += kRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kRows, n_rows - r0));
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokens)
      tile_tokens(f, a, r0, rows, t0, static_cast<int>(std::min<int64_t>(kTokens, n_tokens - t0)));
  }
}

}  // namespace

void gemm_nf4_avx512_rows(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<Nf4>(a, n_rows, n_tokens); }
void gemm_i8_rows_avx512_rows(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  gemm<I8Rows>(a, n_rows, n_tokens);
}

}  // namespace ridge::kernels
