// What the Q8_0/Q4_0 steps of attention/tile_avx2.cpp and attention/tile_avx512.cpp share
// (attention/attention.h: the quantized step): a step's K as int8 with its block scales, and its V
// decoded exactly. Included after the file's target pragma (AVX2 at least),
// attention/tile_simd.h and its traits V, which adds decode_block(x, d, dst): the 32 int8
// values of x times d, as floats, into dst.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "core/quant_blocks.h"
#include "kernels/attention/attention.h"

namespace ridge::kernels {
namespace {

constexpr int kBlock = kQK8_0;  // values per block of K, V and the quantized query

// A quantized step's operands: the queries as attention_quant_queries lays them out, and
// st.work carved into V decoded, K as int8, K's block scales and biases, and the rest for
// the layout's scores and softmax state.
struct QuantStepBuffers {
  int64_t rows_pad;    // the rows rounded up to 16
  const uint32_t* qw;  // [d_head / 4][rows_pad] words of q + 128
  const float* qd;     // [n_blocks][rows_pad] the query blocks' scales
  float* vf;           // [kKeys][d_head]
  int8_t* kx;          // [kKeys][d_head]
  float* kd;           // [n_blocks][kKeys]
  int32_t* kbias;      // [n_blocks][kKeys]
  float* rest;
};

template <class Block>
QuantStepBuffers quant_step_buffers(const AttentionTileStep<Block>& st) {
  constexpr int64_t keys = kAttentionStepKeys;
  const int64_t d_head = st.d_head, n_blocks = d_head / kBlock;
  QuantStepBuffers b;
  b.rows_pad = (st.n_tokens * st.n_heads + 15) / 16 * 16;
  b.qw = reinterpret_cast<const uint32_t*>(st.q8t);
  b.qd = reinterpret_cast<const float*>(st.q8t + b.rows_pad * d_head);
  b.vf = st.work;
  b.kx = reinterpret_cast<int8_t*>(b.vf + keys * d_head);
  b.kd = b.vf + keys * d_head + keys * d_head / 4;
  b.kbias = reinterpret_cast<int32_t*>(b.kd + n_blocks * keys);
  b.rest = b.kd + 2 * n_blocks * keys;
  return b;
}

// A block's 32 values as int8 (Q4_0: low nibbles first, minus 8).
__m256i block_int8(const BlockQ8_0& b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)); }
__m256i block_int8(const BlockQ4_0& b) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs)), nibble = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(x, nibble), hi = _mm_and_si128(_mm_srli_epi16(x, 4), nibble);
  return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
}

// The exact sum of 32 int8 values: sad of the values + 128, less 32 * 128.
int32_t sum_int8(__m256i x) {
  const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(x, _mm256_set1_epi8(static_cast<char>(0x80))),
                                      _mm256_setzero_si256());
  const __m128i s = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
  return static_cast<int32_t>(_mm_cvtsi128_si64(s) + _mm_extract_epi64(s, 1)) - kBlock * 128;
}

// K of lanes [begin, end) for the scores: kx[l][d] the values as int8, kd[b][l] each
// block's scale and, unless kbias is null, kbias[b][l] = -128 * the block's sum (for a dot
// against q + 128); a null row, or a lane outside [lane_begin, lane_end), is zeros.
template <class Block>
void pack_keys(const AttentionTileStep<Block>& st, int begin, int end, int8_t* kx, float* kd, int32_t* kbias) {
  const int64_t d_head = st.d_head, n_blocks = d_head / kBlock;
  for (int l = begin; l < end; ++l) {
    const Block* row = l >= st.lane_begin && l < st.lane_end ? st.k_rows[l] : nullptr;
    for (int64_t b = 0; b < n_blocks; ++b) {
      const __m256i x = row ? block_int8(row[b]) : _mm256_setzero_si256();
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(kx + l * d_head + b * kBlock), x);
      kd[b * kAttentionStepKeys + l] = row ? _cvtsh_ss(row[b].d) : 0.0f;
      if (kbias) kbias[b * kAttentionStepKeys + l] = -128 * sum_int8(x);
    }
  }
}

// V of the step's lanes decoded exactly into vf[l][d] (zeros for a null row).
template <class V, class Block>
void decode_values(const AttentionTileStep<Block>& st, float* vf, const float** v_rows) {
  const int64_t d_head = st.d_head, n_blocks = d_head / kBlock;
  for (int l = st.lane_begin; l < st.lane_end; ++l) {
    const Block* row = st.v_rows[l];
    float* dst = vf + l * d_head;
    for (int64_t b = 0; b < n_blocks; ++b)
      V::decode_block(row ? block_int8(row[b]) : _mm256_setzero_si256(), row ? _cvtsh_ss(row[b].d) : 0.0f,
                      dst + b * kBlock);
    v_rows[l] = dst;
  }
}

}  // namespace
}  // namespace ridge::kernels
