// Scalar inner loops of paged attention over bf16 K/V caches: the references the AVX2
// loops (attention/kv_bf16_avx2.cpp) reproduce bit for bit, so their float operations
// follow the AVX2 lanes, as written out here:
//  K:  per query row, lane l (0..7) sums fma(q[d], k[d], lane) over d = l mod 8 below
//      d8 = d_head / 8 * 8, the lanes add as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)),
//      the tail d >= d8 adds q[d] * k[d] unfused, and the sum is times scale: the f32 AVX2
//      loop's arithmetic, so AVX2 scores over bf16 have the bits of AVX2 scores over its
//      widened values.
//  V:  each value widened exactly, then acc[d] = fma(p, v[d], acc[d]) key by key below d8
//      and acc[d] + p * v[d] unfused past it, as the f32 AVX2 loop does: the bits of that
//      loop on the widened rows.
// (Q8_0 and Q4_0 caches run the tiled step, attention_tile*.cpp.)
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/fp16.h"
#include "kernels/attention/attention.h"

namespace ridge::kernels {

namespace {

constexpr int kLanes = 8;

// The AVX2 horizontal sum's order (avx2_math.h hsum).
float sum_lanes(const float* l) { return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])); }

float widen(Bf16 x) { return bf16_to_fp32(x.bits); }

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

}  // namespace ridge::kernels
