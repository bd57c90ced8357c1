// The tiled attention step with AVX-512F: 16 query rows in one vector
// (attention_tile_simd.h), 32 registers for the score and P * V blocks. attention() reaches it only after
// cpu_supports(Isa::kAvx512Vnni); its bits are the scalar and AVX2 steps'.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/attention.h"

#pragma GCC target("avx2,fma,f16c,avx512f")
// GCC 12 warns that _mm512_cvtph_ps's _mm512_undefined_ps() pass-through is uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/avx2_math.h"
#include "kernels/avx512_math.h"
#include "kernels/attention_tile_simd.h"

namespace ridge::kernels {

namespace {

struct Avx512 {
  using F = __m512;
  static constexpr int kWidth = 16;
  static constexpr int kQkRowVecs = 3;  // 3 x 8 score accumulators of 16 rows
  static constexpr int kQkKeys = 8;
  static constexpr int kPvRows = 6;     // up to 24 output accumulators + 4 V vectors
  static constexpr int kScoreRows = 8;  // keys in lanes (few rows): 8 accumulators

  static F zero() { return _mm512_setzero_ps(); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static F load(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static float load1(const float* p) { return *p; }
  static float load1(const uint16_t* p) { return _cvtsh_ss(*p); }
  static void store(float* p, F x) { _mm512_storeu_ps(p, x); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F exp(F x) { return exp512(x); }

  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }

  // Keys in lanes: lanes part * 16 + i in [lane_begin, lane_end) from a, the others from
  // b; the max of a vector; the sum of a group of 16 lanes (avx2_math.h hsum of the two
  // halves' sum).
  static F select(int lane_begin, int lane_end, int part, F a, F b) {
    const int lo = std::clamp(lane_begin - 16 * part, 0, 16), hi = std::clamp(lane_end - 16 * part, 0, 16);
    const auto in = static_cast<__mmask16>(hi > lo ? ((1u << hi) - 1) & ~((1u << lo) - 1) : 0u);
    return _mm512_mask_blend_ps(in, b, a);
  }
  static float reduce_max(F x) { return _mm512_reduce_max_ps(x); }
  static float sum16(const F* s) {
    const __m256 lo = _mm512_castps512_ps256(s[0]);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s[0]), 1));
    return hsum(_mm256_add_ps(lo, hi));
  }

  // Rows in lanes: the rows (lanes) whose range [row_lb, row_le) holds key l.
  using Mask = __mmask16;
  static Mask key_mask(const int32_t* row_lb, const int32_t* row_le, int l) {
    const __m512i key = _mm512_set1_epi32(l);
    return _mm512_cmple_epi32_mask(_mm512_loadu_si512(row_lb), key) &
           _mm512_cmplt_epi32_mask(key, _mm512_loadu_si512(row_le));
  }
  static F blend(Mask m, F a, F b) { return _mm512_mask_blend_ps(m, b, a); }
  static F maskz(Mask m, F a) { return _mm512_maskz_mov_ps(m, a); }

  // kt[d * kt_stride + i] = rows[i][d] for the 16 rows of a group (a zero row outside the
  // step's lanes).
  template <class T>
  static void pack_group(const T* const* rows, int64_t d_head, float* kt, int64_t kt_stride) {
    const int64_t d16 = d_head / 16 * 16;
    for (int64_t d0 = 0; d0 < d16; d0 += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) r[i] = load(rows[i] + d0);
      transpose16(r);
      for (int i = 0; i < 16; ++i) store(kt + (d0 + i) * kt_stride, r[i]);
    }
    for (int64_t d = d16; d < d_head; ++d)
      for (int i = 0; i < 16; ++i) kt[d * kt_stride + i] = load1(rows[i] + d);
  }
};

}  // namespace

void attention_tile_step_avx512(const AttentionTileStep<float>& step) { tile_step<Avx512>(step); }
void attention_tile_step_avx512(const AttentionTileStep<uint16_t>& step) { tile_step<Avx512>(step); }

}  // namespace ridge::kernels
