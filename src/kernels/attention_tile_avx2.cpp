// The tiled attention step with AVX2+FMA+F16C: 8 query rows in a vector
// (attention_tile_simd.h). Reached only after best_isa() has checked the CPU.
#include <immintrin.h>

#include <cstdint>

#include "kernels/attention.h"

#pragma GCC target("avx2,fma,f16c")

#include "kernels/avx2_math.h"
#include "kernels/attention_tile_simd.h"

namespace ridge::kernels {

namespace {

// 8 rows of 8 floats, transposed in place.
inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

struct Avx2 {
  using F = __m256;
  static constexpr int kWidth = 8;
  static constexpr int kQkRowVecs = 2;  // 2 x 4 score accumulators of 8 rows
  static constexpr int kQkKeys = 4;
  static constexpr int kPvRows = 3;     // up to 12 output accumulators
  static constexpr int kScoreRows = 6;  // keys in lanes (few rows): 12 accumulators + 2 key vectors

  static F zero() { return _mm256_setzero_ps(); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static F load(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static float load1(const float* p) { return *p; }
  static float load1(const uint16_t* p) { return _cvtsh_ss(*p); }
  static void store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F exp(F x) { return exp256(x); }

  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }

  // Keys in lanes: lanes part * 8 + i in [lane_begin, lane_end) from a, the others from
  // b; the max of a vector; the sum of a group of 16 lanes (hsum of the two halves' sum).
  static F select(int lane_begin, int lane_end, int part, F a, F b) {
    const __m256i lane = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(part * 8));
    const __m256i in = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lane_begin), lane),
                                           _mm256_cmpgt_epi32(_mm256_set1_epi32(lane_end), lane));
    return _mm256_blendv_ps(b, a, _mm256_castsi256_ps(in));
  }
  static float reduce_max(F x) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
  }
  static float sum16(const F* s) { return hsum(_mm256_add_ps(s[0], s[1])); }

  // Rows in lanes: the rows (lanes) whose range [row_lb, row_le) holds key l, as all-ones
  // lanes.
  using Mask = __m256;
  static Mask key_mask(const int32_t* row_lb, const int32_t* row_le, int l) {
    const __m256i key = _mm256_set1_epi32(l);
    const __m256i lb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row_lb));
    const __m256i le = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row_le));
    return _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_cmpgt_epi32(lb, key), _mm256_cmpgt_epi32(le, key)));
  }
  static F blend(Mask m, F a, F b) { return _mm256_blendv_ps(b, a, m); }
  static F maskz(Mask m, F a) { return _mm256_and_ps(m, a); }

  // kt[d * kt_stride + i] = rows[i][d] for the 16 rows of a group (a zero row outside the
  // step's lanes), 8 rows at a time.
  template <class T>
  static void pack_group(const T* const* rows, int64_t d_head, float* kt, int64_t kt_stride) {
    const int64_t d8 = d_head / 8 * 8;
    for (int h = 0; h < 16; h += 8) {
      for (int64_t d0 = 0; d0 < d8; d0 += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i) r[i] = load(rows[h + i] + d0);
        transpose8(r);
        for (int i = 0; i < 8; ++i) store(kt + (d0 + i) * kt_stride + h, r[i]);
      }
    }
    for (int64_t d = d8; d < d_head; ++d)
      for (int i = 0; i < 16; ++i) kt[d * kt_stride + i] = load1(rows[i] + d);
  }
};

}  // namespace

void attention_tile_step_avx2(const AttentionTileStep<float>& step) { tile_step<Avx2>(step); }
void attention_tile_step_avx2(const AttentionTileStep<uint16_t>& step) { tile_step<Avx2>(step); }

}  // namespace ridge::kernels
