// The scalar tiled-attention step: the definition (attention/attention.h, AttentionTileStep) that
// the AVX2 and AVX-512 steps reproduce bit for bit, one row at a time.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/cpu_features.h"
#include "core/fp16.h"
#include "kernels/attention/attention.h"
#include "kernels/isa.h"

namespace ridge::kernels {

namespace {

constexpr int kKeys = kAttentionStepKeys;

inline float widen(float x) { return x; }
inline float widen(uint16_t h) { return fp16_to_fp32(h); }

// Element d of a K or V row, decoded exactly.
template <class T>
float value_at(const T* row, int64_t d) {
  return widen(row[d]);
}
int value_int(const BlockQ8_0& b, int64_t i) { return b.qs[i]; }
int value_int(const BlockQ4_0& b, int64_t i) {  // low nibbles first
  return i < kQK4_0 / 2 ? (b.qs[i] & 0x0f) - 8 : (b.qs[i - kQK4_0 / 2] >> 4) - 8;
}
template <class Block>
  requires(std::is_same_v<Block, BlockQ8_0> || std::is_same_v<Block, BlockQ4_0>)
float value_at(const Block* row, int64_t d) {
  const Block& b = row[d / kQK8_0];
  return static_cast<float>(value_int(b, d % kQK8_0)) * fp16_to_fp32(b.d);
}

// Row `row`'s score against K row k before the scale (attention/attention.h's definitions).
template <class T>
float raw_score(const AttentionTileStep<T>& st, int64_t row, const T* k) {
  const float* q = st.q + (row / st.n_heads) * st.q_token_stride + (row % st.n_heads) * st.d_head;
  float acc = 0.0f;
  for (int64_t d = 0; d < st.d_head; ++d) acc = std::fma(q[d], widen(k[d]), acc);
  return acc;
}
template <class Block>
  requires(std::is_same_v<Block, BlockQ8_0> || std::is_same_v<Block, BlockQ4_0>)
float raw_score(const AttentionTileStep<Block>& st, int64_t row, const Block* k) {
  const int64_t n_blocks = st.d_head / kQK8_0;
  const BlockQ8_0* q = st.q8 + row * n_blocks;
  float acc = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int32_t isum = 0;
    for (int i = 0; i < kQK8_0; ++i) isum += q[b].qs[i] * value_int(k[b], i);
    const float d = fp16_to_fp32(q[b].d) * fp16_to_fp32(k[b].d);
    acc = b == 0 ? static_cast<float>(isum) * d : std::fma(static_cast<float>(isum), d, acc);
  }
  return acc;
}

// p[0..16): (p[i] + p[i + 8]), then those at i and i + 4, then (0 + 2) + (1 + 3): the
// order of an 8-lane horizontal sum (avx2_math.h hsum) of the two halves' sum.
float sum16(const float* p) {
  float w[8], x[4];
  for (int i = 0; i < 8; ++i) w[i] = p[i] + p[i + 8];
  for (int i = 0; i < 4; ++i) x[i] = w[i] + w[i + 4];
  return (x[0] + x[2]) + (x[1] + x[3]);
}

template <class T>
void step_scalar(const AttentionTileStep<T>& st) {
  static_assert(kKeys == 64);
  const int64_t n_rows = st.n_tokens * st.n_heads, d_head = st.d_head;
  float* p = st.work;  // [n_rows][kKeys]
  for (int64_t row = 0; row < n_rows; ++row) {
    float* pr = p + row * kKeys;
    std::fill(pr, pr + kKeys, 0.0f);
    const int64_t token = row / st.n_heads;
    const int lb = st.token_lane_begin[token], le = st.token_lane_end[token];
    if (lb >= le) continue;
    float block_max = -INFINITY;
    for (int l = lb; l < le; ++l) {
      float s = raw_score(st, row, st.k_rows[l]) * st.scale;
      if (st.softcap > 0) s = std::tanh(s / st.softcap) * st.softcap;
      pr[l] = s;
      block_max = std::max(block_max, s);
    }
    const float old_max = st.max[row], new_max = std::max(old_max, block_max);
    if (new_max > old_max) {
      if (old_max != -INFINITY) {
        const float correction = attention_exp_poly(old_max - new_max);
        st.sum[row] *= correction;
        for (int64_t d = 0; d < d_head; ++d) st.acc[row * d_head + d] *= correction;
      }
      st.max[row] = new_max;
    }
    for (int l = lb; l < le; ++l) pr[l] = attention_exp_poly(pr[l] - new_max);
    st.sum[row] += ((sum16(pr) + sum16(pr + 16)) + sum16(pr + 32)) + sum16(pr + 48);
  }
  for (int64_t row = 0; row < n_rows; ++row) {
    float* acc = st.acc + row * d_head;
    for (int l = st.lane_begin; l < st.lane_end; ++l) {
      const T* v = st.v_rows[l];
      const float pl = p[row * kKeys + l];
      for (int64_t d = 0; d < d_head; ++d) acc[d] = std::fma(pl, v ? value_at(v, d) : 0.0f, acc[d]);
    }
  }
}

}  // namespace

size_t attention_tile_work_floats(int64_t n_rows, int64_t d_head) {
  // K^T [d_head rounded to 16][keys], V rows [keys][d_head], scores [keys][rows rounded to
  // 16], max, sum, correction and lane range per row, and a zero row.
  const int64_t rows = (n_rows + 15) / 16 * 16;
  const int64_t simd = ((d_head + 15) / 16 * 16 + d_head + rows) * kKeys + 5 * rows + d_head;
  // The AMX step's (attention/tile_amx.cpp): K and V hi/lo in tile layouts (d_head x
  // kKeys floats each), then one group of 16 rows' scores, probabilities as floats and as
  // bf16 hi/lo, max, sum, correction and lane range, its P * V of 64 columns, and a zero
  // row.
  const int64_t amx = 2 * d_head * kKeys + 3 * 16 * kKeys + 5 * 16 + 16 * 64 + d_head;
  return static_cast<size_t>(std::max(simd, amx));
}

bool attention_tile_amx_usable(int64_t d_head) {
  static const bool usable = cpu_supports(Isa::kAmxInt8) && cpu_features().amx_bf16;
  return usable && d_head > 0 && d_head % 64 == 0;
}


// avx2_math.h exp256, one lane: the same operations in the same order.
float attention_exp_poly(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float n = std::nearbyint(x * 1.44269504088896341f);
  float r = std::fma(-n, 0.693359375f, x);
  r = std::fma(-n, -2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  p = std::fma(p, r * r, r + 1.0f);
  const auto e = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(e);
}

void attention_tile_step_scalar(const AttentionTileStep<float>& step) { step_scalar(step); }
void attention_tile_step_scalar(const AttentionTileStep<uint16_t>& step) { step_scalar(step); }
void attention_tile_step_scalar(const AttentionTileStep<BlockQ8_0>& step) { step_scalar(step); }
void attention_tile_step_scalar(const AttentionTileStep<BlockQ4_0>& step) { step_scalar(step); }

size_t attention_quant_queries_bytes(int64_t n_rows, int64_t d_head) {
  const int64_t rows = (n_rows + 15) / 16 * 16;
  return static_cast<size_t>(rows * d_head + rows * (d_head / kQK8_0) * 4);
}

void attention_quant_queries(const BlockQ8_0* q8, int64_t n_rows, int64_t d_head, uint8_t* out) {
  const int64_t rows = (n_rows + 15) / 16 * 16, n_blocks = d_head / kQK8_0;
  uint8_t* words = out;                                            // [d_head / 4][rows][4]
  float* scales = reinterpret_cast<float*>(out + rows * d_head);  // [n_blocks][rows]
  std::fill(out, out + attention_quant_queries_bytes(n_rows, d_head), uint8_t{0});
  for (int64_t row = 0; row < n_rows; ++row)
    for (int64_t b = 0; b < n_blocks; ++b) {
      const BlockQ8_0& qb = q8[row * n_blocks + b];
      scales[b * rows + row] = fp16_to_fp32(qb.d);
      for (int i = 0; i < kQK8_0; ++i) {
        const int64_t d = b * kQK8_0 + i;
        words[((d / 4) * rows + row) * 4 + d % 4] = static_cast<uint8_t>(qb.qs[i] + 128);
      }
    }
}

}  // namespace ridge::kernels
