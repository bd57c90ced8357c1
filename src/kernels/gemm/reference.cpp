// Scalar references of the quantized GEMM: activation quantizers and one dot product per
// weight type (the tables that dispatch to them and the fast kernels: gemm/table.cpp).
#include "kernels/gemm/table.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/fp16.h"
#include "core/quant_blocks.h"

namespace ridge::kernels {

namespace {

constexpr size_t kRowAlign = 64;

size_t round_up(size_t bytes) { return (bytes + kRowAlign - 1) / kRowAlign * kRowAlign; }

// The shared 8-bit rule: d = amax / 127, q = round-half-even(x / d) (via x * (1/d)).
void quantize_q8_group(const float* x, int n, int8_t* q, float* d_out) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int i = 0; i < n; ++i) q[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
  *d_out = d;
}

// Activation row views.
struct ActQ8_0 {
  const int8_t* q;
  const float* d;
};
ActQ8_0 act_q8_0(const uint8_t* act, int64_t n) {
  return {reinterpret_cast<const int8_t*>(act), reinterpret_cast<const float*>(act + n)};
}

// The 6-bit scale and min of each group of a Q4_K/Q5_K block.
void scales_mins_k4(const uint8_t* packed, int* scales, int* mins) {
  for (int g = 0; g < 8; ++g) {
    uint8_t s, m;
    unpack_scale_min_k4(g, packed, &s, &m);
    scales[g] = s;
    mins[g] = m;
  }
}

void copy_act_f32(const float* x, uint8_t* dst, int64_t n_in) {
  std::memcpy(dst, x, static_cast<size_t>(n_in) * sizeof(float));
}

}  // namespace

void quantize_act_q8_0_scalar(const float* x, uint8_t* dst, int64_t n_in) {
  auto* q = reinterpret_cast<int8_t*>(dst);
  auto* d = reinterpret_cast<float*>(dst + n_in);
  auto* sums = reinterpret_cast<int32_t*>(d + n_in / kQK8_0);
  for (int64_t b = 0; b < n_in / kQK8_0; ++b) {
    quantize_q8_group(x + b * kQK8_0, kQK8_0, q + b * kQK8_0, d + b);
    int32_t sum = 0;
    for (int l = 0; l < kQK8_0; ++l) sum += q[b * kQK8_0 + l];
    sums[b] = sum;
  }
}

void quantize_act_q8_k_scalar(const float* x, uint8_t* dst, int64_t n_in) {
  auto* blocks = reinterpret_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < n_in / kQK_K; ++b) {
    BlockQ8_K& block = blocks[b];
    quantize_q8_group(x + b * kQK_K, kQK_K, block.qs, &block.d);
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += block.qs[16 * g + l];
      block.bsums[g] = static_cast<int16_t>(sum);
    }
  }
}


size_t act_row_bytes(ActFormat format, int64_t n_in) {
  const size_t n = static_cast<size_t>(n_in);
  switch (format) {
    case ActFormat::kF32: return round_up(n * sizeof(float));
    case ActFormat::kQ8_0: return round_up(n + n / kQK8_0 * (sizeof(float) + sizeof(int32_t)));
    case ActFormat::kQ8_K: return round_up(n / kQK_K * sizeof(BlockQ8_K));
  }
  return 0;
}

QuantizeActFn act_quantizer(ActFormat format, Isa isa) {
  switch (format) {
    case ActFormat::kF32: return copy_act_f32;
    case ActFormat::kQ8_0: return isa == Isa::kScalar ? quantize_act_q8_0_scalar : quantize_act_q8_0_avx2;
    case ActFormat::kQ8_K: return isa == Isa::kScalar ? quantize_act_q8_k_scalar : quantize_act_q8_k_avx2;
  }
  return nullptr;
}

void quantize_activations(ActFormat format, Isa isa, const float* x, uint8_t* dst, int64_t n_in) {
  act_quantizer(format, isa)(x, dst, n_in);
}

int64_t q8_0_scales_t_stride(int64_t n_tokens) { return (n_tokens + 7) / 8 * 8; }

size_t q8_0_scales_t_floats(int64_t n_in, int64_t n_tokens) {
  return static_cast<size_t>(n_in / kQK8_0 * q8_0_scales_t_stride(n_tokens));
}

void transpose_q8_0_scales(const uint8_t* act, size_t act_stride, int64_t n_in, int64_t n_tokens, float* dst) {
  const int64_t nb = n_in / kQK8_0, stride = q8_0_scales_t_stride(n_tokens);
  auto* sums_t = reinterpret_cast<int32_t*>(dst + q8_0_scales_t_floats(n_in, n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const auto* d = reinterpret_cast<const float*>(act + t * act_stride + n_in);
    const auto* sums = reinterpret_cast<const int32_t*>(d + nb);
    for (int64_t b = 0; b < nb; ++b) {
      dst[b * stride + t] = d[b];
      sums_t[b * stride + t] = sums[b];
    }
  }
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t t = n_tokens; t < stride; ++t) {
      dst[b * stride + t] = 0.0f;
      sums_t[b * stride + t] = 0;
    }
}

float vec_dot_q8_0_scalar(int64_t n, const uint8_t* w, const uint8_t* act) {
  const auto* blocks = reinterpret_cast<const BlockQ8_0*>(w);
  const ActQ8_0 a = act_q8_0(act, n);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    int sumi = 0;
    for (int l = 0; l < kQK8_0; ++l) sumi += blocks[b].qs[l] * a.q[b * kQK8_0 + l];
    sum = std::fma(static_cast<float>(sumi), fp16_to_fp32(blocks[b].d) * a.d[b], sum);
  }
  return sum;
}

float vec_dot_q4_0_scalar(int64_t n, const uint8_t* w, const uint8_t* act) {
  const auto* blocks = reinterpret_cast<const BlockQ4_0*>(w);
  const ActQ8_0 a = act_q8_0(act, n);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK4_0; ++b) {
    const int8_t* y = a.q + b * kQK4_0;
    int sumi = 0;
    for (int l = 0; l < kQK4_0 / 2; ++l) {
      sumi += ((blocks[b].qs[l] & 0xf) - 8) * y[l];
      sumi += ((blocks[b].qs[l] >> 4) - 8) * y[l + 16];
    }
    sum = std::fma(static_cast<float>(sumi), fp16_to_fp32(blocks[b].d) * a.d[b], sum);
  }
  return sum;
}

float vec_dot_q5_0_scalar(int64_t n, const uint8_t* w, const uint8_t* act) {
  const auto* blocks = reinterpret_cast<const BlockQ5_0*>(w);
  const ActQ8_0 a = act_q8_0(act, n);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK5_0; ++b) {
    const BlockQ5_0& block = blocks[b];
    uint32_t qh;
    std::memcpy(&qh, block.qh, sizeof(qh));
    const int8_t* y = a.q + b * kQK5_0;
    int sumi = 0;
    for (int l = 0; l < kQK5_0 / 2; ++l) {
      const int lo = (block.qs[l] & 0xf) | (((qh >> l) & 1) << 4);
      const int hi = (block.qs[l] >> 4) | (((qh >> (l + 16)) & 1) << 4);
      sumi += (lo - 16) * y[l] + (hi - 16) * y[l + 16];
    }
    sum = std::fma(static_cast<float>(sumi), fp16_to_fp32(block.d) * a.d[b], sum);
  }
  return sum;
}

// Q4_1/Q5_1: x = d * q + m with unsigned q, so a block gives d * dy * sum(q * y) plus
// m * dy * sum(y): two fmas per block, the scale then the min, the min through the
// activation block sum.
template <class Block>
float vec_dot_min_scalar(int64_t n, const uint8_t* w, const uint8_t* act) {
  constexpr bool kHighBit = std::is_same_v<Block, BlockQ5_1>;
  const auto* blocks = reinterpret_cast<const Block*>(w);
  const ActQ8_0 a = act_q8_0(act, n);
  const auto* sums = reinterpret_cast<const int32_t*>(a.d + n / kQK8_0);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const Block& block = blocks[b];
    [[maybe_unused]] uint32_t qh = 0;
    if constexpr (kHighBit) std::memcpy(&qh, block.qh, sizeof(qh));
    const int8_t* y = a.q + b * kQK8_0;
    int sumi = 0;
    for (int l = 0; l < kQK8_0 / 2; ++l) {
      int lo = block.qs[l] & 0xf, hi = block.qs[l] >> 4;
      if constexpr (kHighBit) {
        lo |= ((qh >> l) & 1) << 4;
        hi |= ((qh >> (l + 16)) & 1) << 4;
      }
      sumi += lo * y[l] + hi * y[l + 16];
    }
    sum = std::fma(static_cast<float>(sumi), fp16_to_fp32(block.d) * a.d[b], sum);
    sum = std::fma(static_cast<float>(sums[b]), fp16_to_fp32(block.m) * a.d[b], sum);
  }
  return sum;
}

float vec_dot_q4_1_scalar(int64_t n, const uint8_t* w, const uint8_t* act) {
  return vec_dot_min_scalar<BlockQ4_1>(n, w, act);
}

float vec_dot_q5_1_scalar(int64_t n, const uint8_t* w, const uint8_t* act) {
  return vec_dot_min_scalar<BlockQ5_1>(n, w, act);
}

// Q4_K/Q5_K: sum_g scale_g * sum(q * y) in integers; the mins through the 16-sums.
// Q5_K adds a fifth bit per weight from qh; otherwise the two formats are the same.
template <class Block>
float vec_dot_k4_scalar(int64_t n, const uint8_t* w, const uint8_t* act) {
  constexpr bool kHighBit = std::is_same_v<Block, BlockQ5_K>;
  const auto* blocks = reinterpret_cast<const Block*>(w);
  const auto* a = reinterpret_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int scales[8], mins[8];
    scales_mins_k4(blocks[b].scales, scales, mins);
    int sumi = 0, summ = 0;
    for (int g = 0; g < 8; ++g) {
      const uint8_t* qs = blocks[b].qs + 32 * (g / 2);
      const int shift = 4 * (g % 2);
      int group = 0;
      for (int l = 0; l < 32; ++l) {
        int q = (qs[l] >> shift) & 0xf;
        if constexpr (kHighBit) q |= ((blocks[b].qh[l] >> g) & 1) << 4;
        group += q * a[b].qs[32 * g + l];
      }
      sumi += scales[g] * group;
      summ += mins[g] * (a[b].bsums[2 * g] + a[b].bsums[2 * g + 1]);
    }
    sum = std::fma(static_cast<float>(sumi), fp16_to_fp32(blocks[b].d) * a[b].d, sum);
    sum = std::fma(-static_cast<float>(summ), fp16_to_fp32(blocks[b].dmin) * a[b].d, sum);
  }
  return sum;
}

float vec_dot_q4_k_scalar(int64_t n, const uint8_t* w, const uint8_t* act) {
  return vec_dot_k4_scalar<BlockQ4_K>(n, w, act);
}

float vec_dot_q5_k_scalar(int64_t n, const uint8_t* w, const uint8_t* act) {
  return vec_dot_k4_scalar<BlockQ5_K>(n, w, act);
}

// Q6_K: sum_g scale_g * sum((q - 32) * y), the -32 through the 16-sums.
float vec_dot_q6_k_scalar(int64_t n, const uint8_t* w, const uint8_t* act) {
  const auto* blocks = reinterpret_cast<const BlockQ6_K*>(w);
  const auto* a = reinterpret_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ6_K& block = blocks[b];
    int sumi = 0;
    for (int g = 0; g < 16; ++g) {
      int group = 0;
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * g + l;
        const int half = e / 128, quarter = (e % 128) / 32, lane = e % 32;
        const int low = (block.ql[64 * half + lane + 32 * (quarter % 2)] >> (4 * (quarter / 2))) & 0xf;
        const int high = (block.qh[32 * half + lane] >> (2 * quarter)) & 3;
        group += (low | (high << 4)) * a[b].qs[e];
      }
      sumi += block.scales[g] * (group - 32 * a[b].bsums[g]);
    }
    sum = std::fma(static_cast<float>(sumi), fp16_to_fp32(block.d) * a[b].d, sum);
  }
  return sum;
}

float vec_dot_f32_scalar(int64_t n, const uint8_t* w, const uint8_t* act) {
  const auto* v = reinterpret_cast<const float*>(w);
  const auto* x = reinterpret_cast<const float*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += v[i] * x[i];
  return sum;
}

float vec_dot_f16_scalar(int64_t n, const uint8_t* w, const uint8_t* act) {
  const auto* h = reinterpret_cast<const uint16_t*>(w);
  const auto* x = reinterpret_cast<const float*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += fp16_to_fp32(h[i]) * x[i];
  return sum;
}

float vec_dot_bf16_scalar(int64_t n, const uint8_t* w, const uint8_t* act) {
  const auto* h = reinterpret_cast<const uint16_t*>(w);
  const auto* x = reinterpret_cast<const float*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += bf16_to_fp32(h[i]) * x[i];
  return sum;
}

}  // namespace ridge::kernels
