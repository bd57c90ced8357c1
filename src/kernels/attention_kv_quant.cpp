// Scalar inner loops of paged attention over bf16, Q8_0 and Q4_0 K/V caches: the references
// the AVX2 loops (attention_kv_quant_avx2.cpp) reproduce bit for bit, so their float
// operations follow the AVX2 lanes, as written out here:
//  bf16 K:  per query row, lane l (0..7) sums fma(q[d], k[d], lane) over d = l mod 8 below
//           d8 = d_head / 8 * 8, the lanes add as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)),
//           the tail d >= d8 adds q[d] * k[d] unfused, and the sum is times scale: the f32 AVX2
//           loop's arithmetic, so AVX2 scores over bf16 have the bits of AVX2 scores over its
//           widened values.
//  Q8_0/Q4_0 K: each query row is quantized to Q8_0 blocks by quantize_row_q8_0 (d = amax / 127,
//           q = x * (1 / d) rounded half away from zero, d stored as f16 and used so rounded, as
//           ggml's vec_dot_q8_0_q8_0 does). Per key and block b, with d_b = dq_b * dk_b, lane l
//           (0..7) takes fma(float(isum_l), d_b, lane), isum_l the exact integer sum of the
//           products of the block's elements 4l..4l+3; the lanes then add as for bf16, and times
//           scale. The query is quantized once per call, at most kQueryBlocks blocks at a time.
//  V:       each value decoded exactly (a bf16 widened; d * q, which float holds exactly: 11
//           significant bits times at most 8), then acc[d] = fma(p, v[d], acc[d]) key by key, as
//           the f32 AVX2 loop does (it adds acc[d] + p * v[d] unfused for d >= d8, which only
//           bf16 can have): every V type gives that loop's bits on its decoded rows.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>

#include "core/fp16.h"
#include "core/quant.h"
#include "kernels/attention.h"

namespace ridge::kernels {

namespace {

constexpr int kLanes = 8;
constexpr int kBlock = kQK8_0;  // values per block of the quantized query, and of K/V
static_assert(kQK4_0 == kBlock);
constexpr int64_t kQueryBlocks = 128;  // query blocks quantized at once: 16 rows of 256

// The AVX2 horizontal sum's order (avx2_math.h hsum).
float sum_lanes(const float* l) { return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])); }

float widen(Bf16 x) { return bf16_to_fp32(x.bits); }

// A block's values as integers: Q8_0's as stored; Q4_0's nibbles minus 8, low nibbles
// first.
void block_values(const BlockQ8_0& b, int8_t* out) {
  for (int i = 0; i < kBlock; ++i) out[i] = b.qs[i];
}
void block_values(const BlockQ4_0& b, int8_t* out) {
  for (int i = 0; i < kBlock / 2; ++i) {
    out[i] = static_cast<int8_t>((b.qs[i] & 0x0f) - 8);
    out[i + kBlock / 2] = static_cast<int8_t>((b.qs[i] >> 4) - 8);
  }
}

// Scores of query rows already quantized to Q8_0 blocks, [n_rep][d_head / kBlock].
template <class Block>
void quant_scores(const BlockQ8_0* query, int64_t n_rep, int64_t d_head, const Block* k, int64_t row_stride,
                  int64_t count, float scale, float* scores, int64_t score_stride) {
  assert(d_head % kBlock == 0);
  const int64_t n_blocks = d_head / kBlock;
  int8_t k_values[kBlock];
  for (int64_t j = 0; j < count; ++j) {
    for (int64_t r = 0; r < n_rep; ++r) {
      float lanes[kLanes] = {};
      for (int64_t b = 0; b < n_blocks; ++b) {
        const Block& kb = k[j * row_stride + b];
        const BlockQ8_0& qb = query[r * n_blocks + b];
        block_values(kb, k_values);
        const float d = fp16_to_fp32(qb.d) * fp16_to_fp32(kb.d);
        for (int l = 0; l < kLanes; ++l) {
          int32_t isum = 0;
          for (int i = 4 * l; i < 4 * l + 4; ++i) isum += qb.qs[i] * k_values[i];
          lanes[l] = std::fma(static_cast<float>(isum), d, lanes[l]);
        }
      }
      scores[r * score_stride + j] = sum_lanes(lanes) * scale;
    }
  }
}

template <class Block>
void quant_scores(const float* q, int64_t n_rep, int64_t d_head, const Block* k, int64_t row_stride, int64_t count,
                  float scale, float* scores, int64_t score_stride) {
  assert(d_head % kBlock == 0 && d_head / kBlock <= kQueryBlocks);
  const int64_t n_blocks = d_head / kBlock;
  const int64_t chunk_rows = kQueryBlocks / n_blocks;
  BlockQ8_0 query[kQueryBlocks];  // [chunk_rows][n_blocks]
  for (int64_t r0 = 0; r0 < n_rep; r0 += chunk_rows) {
    const int64_t n_rows = std::min(chunk_rows, n_rep - r0);
    quantize_row_q8_0(q + r0 * d_head, query, n_rows * d_head);
    quant_scores(query, n_rows, d_head, k, row_stride, count, scale, scores + r0 * score_stride, score_stride);
  }
}

template <class Block>
void quant_accumulate(const float* p, int64_t p_stride, int64_t n_rep, const Block* v, int64_t row_stride,
                      int64_t count, int64_t d_head, float* acc, int64_t acc_stride) {
  assert(d_head % kBlock == 0);
  int8_t q[kBlock];
  float values[kBlock];
  for (int64_t j = 0; j < count; ++j) {
    for (int64_t b = 0; b < d_head / kBlock; ++b) {
      const Block& vb = v[j * row_stride + b];
      block_values(vb, q);
      const float d = fp16_to_fp32(vb.d);
      for (int i = 0; i < kBlock; ++i) values[i] = static_cast<float>(q[i]) * d;  // exact
      for (int64_t r = 0; r < n_rep; ++r) {
        const float pj = p[r * p_stride + j];
        float* a = acc + r * acc_stride + kBlock * b;
        for (int i = 0; i < kBlock; ++i) a[i] = std::fma(pj, values[i], a[i]);
      }
    }
  }
}

}  // namespace

void attention_scores_scalar(const float* q, int64_t n_rep, int64_t d_head, const Bf16* k, int64_t row_stride,
                             int64_t count, float scale, float* scores, int64_t score_stride) {
  const int64_t d8 = d_head / kLanes * kLanes;
  for (int64_t j = 0; j < count; ++j) {
    const Bf16* kj = k + j * row_stride;
    for (int64_t r = 0; r < n_rep; ++r) {
      const float* qr = q + r * d_head;
      float lanes[kLanes] = {};
      for (int64_t d = 0; d < d8; ++d) lanes[d % kLanes] = std::fma(qr[d], widen(kj[d]), lanes[d % kLanes]);
      float sum = sum_lanes(lanes);
      for (int64_t d = d8; d < d_head; ++d) sum += qr[d] * widen(kj[d]);
      scores[r * score_stride + j] = sum * scale;
    }
  }
}

void attention_accumulate_scalar(const float* p, int64_t p_stride, int64_t n_rep, const Bf16* v, int64_t row_stride,
                                 int64_t count, int64_t d_head, float* acc, int64_t acc_stride) {
  const int64_t d8 = d_head / kLanes * kLanes;
  for (int64_t j = 0; j < count; ++j) {
    const Bf16* vj = v + j * row_stride;
    for (int64_t r = 0; r < n_rep; ++r) {
      const float pj = p[r * p_stride + j];
      float* ar = acc + r * acc_stride;
      for (int64_t d = 0; d < d8; ++d) ar[d] = std::fma(pj, widen(vj[d]), ar[d]);
      for (int64_t d = d8; d < d_head; ++d) ar[d] += pj * widen(vj[d]);
    }
  }
}

void attention_scores_scalar(const float* q, int64_t n_rep, int64_t d_head, const BlockQ8_0* k,
                             int64_t row_stride, int64_t count, float scale, float* scores, int64_t score_stride) {
  quant_scores(q, n_rep, d_head, k, row_stride, count, scale, scores, score_stride);
}

void attention_scores_scalar(const float* q, int64_t n_rep, int64_t d_head, const BlockQ4_0* k,
                             int64_t row_stride, int64_t count, float scale, float* scores, int64_t score_stride) {
  quant_scores(q, n_rep, d_head, k, row_stride, count, scale, scores, score_stride);
}

void attention_scores_scalar(const BlockQ8_0* q, int64_t n_rep, int64_t d_head, const BlockQ8_0* k,
                             int64_t row_stride, int64_t count, float scale, float* scores, int64_t score_stride) {
  quant_scores(q, n_rep, d_head, k, row_stride, count, scale, scores, score_stride);
}

void attention_scores_scalar(const BlockQ8_0* q, int64_t n_rep, int64_t d_head, const BlockQ4_0* k,
                             int64_t row_stride, int64_t count, float scale, float* scores, int64_t score_stride) {
  quant_scores(q, n_rep, d_head, k, row_stride, count, scale, scores, score_stride);
}

void attention_accumulate_scalar(const float* p, int64_t p_stride, int64_t n_rep, const BlockQ8_0* v,
                                 int64_t row_stride, int64_t count, int64_t d_head, float* acc, int64_t acc_stride) {
  quant_accumulate(p, p_stride, n_rep, v, row_stride, count, d_head, acc, acc_stride);
}

void attention_accumulate_scalar(const float* p, int64_t p_stride, int64_t n_rep, const BlockQ4_0* v,
                                 int64_t row_stride, int64_t count, int64_t d_head, float* acc, int64_t acc_stride) {
  quant_accumulate(p, p_stride, n_rep, v, row_stride, count, d_head, acc, acc_stride);
}

}  // namespace ridge::kernels
