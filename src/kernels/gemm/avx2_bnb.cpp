// AVX2 integer GEMM for the runtime weight formats NF4 and I8_ROWS (core/quant_bnb.h)
// against Q8_0 activations, bit-identical to vec_dot_nf4_scalar / vec_dot_i8_rows_scalar.
//
// A tile is 4 weight rows x up to 4 tokens, the rows in the lanes of the float
// accumulators: each lane runs its row's scalar sequence (one fma per 32-element group,
// in group order), so no float sum is ever reordered. NF4 nibbles become int8 weights
// through one byte shuffle of the 16-entry nf4_values_i8 table; products use the sign
// trick (maddubs(|w|, y with w's sign), then madd) and exact lane-sum trees.
//
//   gemm_nf4_avx2({n_in, w, row_size(DType::NF4, n_in), act, act_stride, y, ldy}, n_rows, n_tokens);
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "core/quant_bnb.h"
#include "kernels/gemm/table.h"

#pragma GCC target("avx2,fma,f16c")

#include "kernels/gemm/q8_tiles.h"  // load256, sum_lanes8

namespace ridge::kernels {

namespace {

constexpr int kRows = 4;    // weight rows per tile: the lanes of one __m128
constexpr int kTokens = 4;  // tokens per pass over a tile's rows (they stay in L1)

// The weights of a 64-element step (groups 2k, 2k + 1) of one row as int8, in element
// order, and each row's float factors. Every format provides:
//   Row row(const uint8_t* bytes, int64_t n);
//   void step(const Row&, int64_t k, __m256i& lo, __m256i& hi);
//   __m128 step_scale(const Row (&)[kRows], int64_t k);  // per-row factor of d_act[g]
//   __m128 row_scale(const Row (&)[kRows]);               // applied once at the end
// A factor of 1.0f is exact, so both formats share one sequence of float operations.
struct Nf4 {
  static constexpr bool kHalfSteps = false;  // n is a multiple of 64
  struct Row {
    Nf4Row nf4;
  };
  __m256i table = _mm256_broadcastsi128_si256(load128(nf4_values_i8().data()));
  const std::array<float, 256>& map = dynamic_map();

  Row row(const uint8_t* bytes, int64_t n) const { return {nf4_row(bytes, n)}; }
  void step(const Row& r, int64_t b, __m256i& lo, __m256i& hi) const {
    const __m256i q = load256(r.nf4.qs + 32 * b);  // byte l: element l low, l + 32 high
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    lo = _mm256_shuffle_epi8(table, _mm256_and_si256(q, low4));
    hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), low4));
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
  void step(const Row& r, int64_t k, __m256i& lo, __m256i& hi) const {
    lo = load256(r.q + 64 * k);
    hi = load256(r.q + 64 * k + 32);
  }
  __m256i last_group(const Row& r, int64_t g) const { return load256(r.q + 32 * g); }
  __m128 step_scale(const Row (&)[kRows], int64_t) const { return _mm_set1_ps(1.0f); }
  __m128 row_scale(const Row (&r)[kRows]) const { return _mm_setr_ps(r[0].scale, r[1].scale, r[2].scale, r[3].scale); }
};

// 8 int32 lanes summing to the exact dot of signed weights w and activations y.
inline __m256i dot32(__m256i w, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(y, w)), _mm256_set1_epi16(1));
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
  __m128 acc[T];
  for (int t = 0; t < T; ++t) {
    const uint8_t* row = a.act + (t0 + t) * a.act_stride;
    yq[t] = reinterpret_cast<const int8_t*>(row);
    yd[t] = reinterpret_cast<const float*>(row + a.n_in);
    acc[t] = _mm_setzero_ps();
  }
  // The next tile's rows, a line of each per step at the step's share of the row.
  const int64_t n_steps = n_groups / 2;
  const size_t step_bytes = n_steps > 0 ? (a.w_stride + n_steps - 1) / n_steps : 0;
  const uint8_t* next = a.w + (r0 + kRows) * a.w_stride;
  for (int64_t k = 0; k < n_steps; ++k) {
    prefetch_rows_l1(next, a.w_stride, kRows, k * step_bytes);
    __m256i lo[kRows], hi[kRows];
    for (int r = 0; r < kRows; ++r) f.step(w[r], k, lo[r], hi[r]);
    const __m128 c = f.step_scale(w, k);
    for (int t = 0; t < T; ++t) {
      const __m256i y_lo = load256(yq[t] + 64 * k), y_hi = load256(yq[t] + 64 * k + 32);
      __m256i p[8];  // lanes of the result: rows 0..3 of group 2k, then of group 2k + 1
      for (int r = 0; r < kRows; ++r) {
        p[r] = dot32(lo[r], y_lo);
        p[kRows + r] = dot32(hi[r], y_hi);
      }
      const __m256 s = _mm256_cvtepi32_ps(sum_lanes8(p));
      acc[t] = _mm_fmadd_ps(_mm256_castps256_ps128(s), _mm_mul_ps(c, _mm_set1_ps(yd[t][2 * k])), acc[t]);
      acc[t] = _mm_fmadd_ps(_mm256_extractf128_ps(s, 1), _mm_mul_ps(c, _mm_set1_ps(yd[t][2 * k + 1])), acc[t]);
    }
  }
  if constexpr (F::kHalfSteps) {
    if (n_groups % 2 != 0) {  // the last group alone (I8_ROWS, scale factor 1)
      const int64_t g = n_groups - 1;
      __m256i wq[kRows];
      for (int r = 0; r < kRows; ++r) wq[r] = f.last_group(w[r], g);
      for (int t = 0; t < T; ++t) {
        const __m256i y = load256(yq[t] + 32 * g);
        __m256i p[8];
        for (int r = 0; r < kRows; ++r) {
          p[r] = dot32(wq[r], y);
          p[kRows + r] = _mm256_setzero_si256();
        }
        const __m256 s = _mm256_cvtepi32_ps(sum_lanes8(p));
        acc[t] = _mm_fmadd_ps(_mm256_castps256_ps128(s), _mm_set1_ps(yd[t][g]), acc[t]);
      }
    }
  }
  const __m128 scale = f.row_scale(w);
  for (int t = 0; t < T; ++t) {
    alignas(16) float out[kRows];
    _mm_store_ps(out, _mm_mul_ps(acc[t], scale));
    std::copy(out, out + rows, a.y + (t0 + t) * a.ldy + r0);
  }
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

void gemm_nf4_avx2(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<Nf4>(a, n_rows, n_tokens); }
void gemm_i8_rows_avx2(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<I8Rows>(a, n_rows, n_tokens); }

}  // namespace ridge::kernels
