// The tiled attention step with AVX2+FMA+F16C: 8 query rows in a vector
// (attention/tile_simd.h). Reached only after best_isa() has checked the CPU. Q8_0/Q4_0
// caches take the same softmax and P * V with their scores from vpmaddubsw/vpmaddwd
// against the query's Q8_0 blocks, their bits the scalar Q8_0/Q4_0 step's.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/quant_blocks.h"
#include "kernels/attention/attention.h"

#pragma GCC target("avx2,fma,f16c")

#include "kernels/avx2_math.h"
#include "kernels/attention/tile_simd.h"
#include "kernels/attention/tile_quant.h"

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

  // The 32 int8 values of x times d into dst (attention/tile_quant.h).
  static void decode_block(__m256i x, float d, float* dst) {
    const __m256 scale = _mm256_set1_ps(d);
    const __m128i lo = _mm256_castsi256_si128(x), hi = _mm256_extracti128_si256(x, 1);
    const __m128i parts[4] = {lo, _mm_unpackhi_epi64(lo, lo), hi, _mm_unpackhi_epi64(hi, hi)};
    for (int i = 0; i < 4; ++i)
      _mm256_storeu_ps(dst + 8 * i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[i])), scale));
  }

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

// --- Q8_0 and Q4_0 caches (attention/tile_quant.h: K packed, V decoded), rows in lanes
// for every tile, decode included, so a token's bits do not depend on its batch.

// The exact dot of 4-value words for 8 rows (q: their words as int8) against one key's
// word k broadcast, added to acc: vpmaddubsw of |k| and q * sign(k), whose pair sums
// (at most 2 * 128 * 127) cannot saturate, then vpmaddwd into int32.
inline __m256i dot_words(__m256i acc, __m256i q, __m256i k, __m256i k_abs) {
  const __m256i pairs = _mm256_maddubs_epi16(k_abs, _mm256_sign_epi8(q, k));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

// NRV row vectors by KK keys: s[l][row] for lanes l0 .. l0 + KK, each block's
// float(isum) * d added as attention/attention.h defines (the first a product), in s between
// blocks, times scale at the last. qw and qd point at the first row of
// attention_quant_queries' words (q + 128) and scales.
template <int NRV, int KK>
void quant_score_block(const uint32_t* qw, const float* qd, int64_t rows_pad, const int8_t* kx, const float* kd,
                       int l0, int64_t d_head, float scale, float* s) {
  const int64_t n_blocks = d_head / kBlock;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < n_blocks; ++b) {
    __m256i isum[NRV][KK];
    for (int i = 0; i < NRV; ++i)
      for (int l = 0; l < KK; ++l) isum[i][l] = _mm256_setzero_si256();
    for (int w = 0; w < kBlock / 4; ++w) {
      __m256i q[NRV];
      for (int i = 0; i < NRV; ++i)
        q[i] = _mm256_xor_si256(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qw + (b * 8 + w) * rows_pad + i * 8)), flip);
      for (int l = 0; l < KK; ++l) {
        int32_t word;
        std::memcpy(&word, kx + (l0 + l) * d_head + b * kBlock + 4 * w, 4);
        const __m256i k = _mm256_set1_epi32(word), k_abs = _mm256_abs_epi8(k);
        for (int i = 0; i < NRV; ++i) isum[i][l] = dot_words(isum[i][l], q[i], k, k_abs);
      }
    }
    for (int l = 0; l < KK; ++l) {
      const __m256 k_scale = _mm256_set1_ps(kd[b * kKeys + l0 + l]);
      for (int i = 0; i < NRV; ++i) {
        float* out = s + (l0 + l) * rows_pad + i * 8;
        const __m256 d = _mm256_mul_ps(_mm256_loadu_ps(qd + b * rows_pad + i * 8), k_scale);
        const __m256 x = _mm256_cvtepi32_ps(isum[i][l]);
        __m256 acc = b == 0 ? _mm256_mul_ps(x, d) : _mm256_fmadd_ps(x, d, _mm256_loadu_ps(out));
        if (b == n_blocks - 1) acc = _mm256_mul_ps(acc, _mm256_set1_ps(scale));
        _mm256_storeu_ps(out, acc);
      }
    }
  }
}

constexpr int kQuantRowVecs = 2, kQuantKeys = 4;  // 8 int32 accumulators

template <class Block>
void quant_step(const AttentionTileStep<Block>& st) {
  const int64_t n_rows = st.n_tokens * st.n_heads, d_head = st.d_head;
  const auto [rows_pad, qw, qd, vf, kx, kd, kbias, rest] = quant_step_buffers(st);
  float* s = rest;                      // [kKeys][rows_pad]
  float* stats = s + kKeys * rows_pad;  // [5][rows_pad]
  const int l_begin = st.lane_begin / kQuantKeys * kQuantKeys;
  const int l_end = (st.lane_end + kQuantKeys - 1) / kQuantKeys * kQuantKeys;
  pack_keys(st, l_begin, l_end, kx, kd, nullptr);  // no bias: q is signed here
  const float* v_rows[kKeys];
  decode_values<Avx2>(st, vf, v_rows);
  const int64_t n_vecs = (n_rows + 7) / 8;
  for (int64_t v0 = 0; v0 < n_vecs; v0 += kQuantRowVecs) {
    const int64_t r0 = v0 * 8;
    for (int l0 = l_begin; l0 < l_end; l0 += kQuantKeys) {
      if (n_vecs - v0 >= 2)
        quant_score_block<2, kQuantKeys>(qw + r0, qd + r0, rows_pad, kx, kd, l0, d_head, st.scale, s + r0);
      else
        quant_score_block<1, kQuantKeys>(qw + r0, qd + r0, rows_pad, kx, kd, l0, d_head, st.scale, s + r0);
    }
  }
  finish_rows_in_lanes<Avx2>(st, s, stats, v_rows);
}

}  // namespace

void attention_tile_step_avx2(const AttentionTileStep<float>& step) { tile_step<Avx2>(step); }
void attention_tile_step_avx2(const AttentionTileStep<uint16_t>& step) { tile_step<Avx2>(step); }
void attention_tile_step_avx2(const AttentionTileStep<BlockQ8_0>& step) { quant_step(step); }
void attention_tile_step_avx2(const AttentionTileStep<BlockQ4_0>& step) { quant_step(step); }

}  // namespace ridge::kernels
