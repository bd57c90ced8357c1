// Scalar references of the quantized GEMM: activation quantizers, one dot product per
// weight type, and the kernel table matmul dispatches through.
#include "kernels/gemm.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "core/quant_bnb.h"
#include "kernels/convert.h"
#include "kernels/dot.h"

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

// Runs a scalar vec_dot over every (row, token) pair.
template <float (*Dot)(int64_t, const uint8_t*, const uint8_t*)>
void gemm_scalar(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t r = 0; r < n_rows; ++r)
      a.y[t * a.ldy + r] = Dot(a.n_in, a.w + r * a.w_stride, a.act + t * a.act_stride);
}

}  // namespace

Isa best_isa() {
  static const Isa isa = cpu_has_avx2_fma() && cpu_has_f16c_avx2() ? Isa::kAvx2 : Isa::kScalar;
  return isa;
}

bool cpu_has_avx512f() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = best_isa() == Isa::kAvx2 && __builtin_cpu_supports("avx512f");
  return has;
#else
  return false;
#endif
}

Isa attention_best_isa() { return cpu_has_avx512f() ? Isa::kAvx512 : best_isa(); }

size_t act_row_bytes(ActFormat format, int64_t n_in) {
  const size_t n = static_cast<size_t>(n_in);
  switch (format) {
    case ActFormat::kF32: return round_up(n * sizeof(float));
    case ActFormat::kQ8_0: return round_up(n + n / kQK8_0 * (sizeof(float) + sizeof(int32_t)));
    case ActFormat::kQ8_K: return round_up(n / kQK_K * sizeof(BlockQ8_K));
  }
  return 0;
}

void quantize_activations(ActFormat format, Isa isa, const float* x, uint8_t* dst, int64_t n_in) {
  switch (format) {
    case ActFormat::kF32:
      std::memcpy(dst, x, static_cast<size_t>(n_in) * sizeof(float));
      return;
    case ActFormat::kQ8_0:
      if (isa == Isa::kAvx2) quantize_act_q8_0_avx2(x, dst, n_in);
      else quantize_act_q8_0_scalar(x, dst, n_in);
      return;
    case ActFormat::kQ8_K:
      if (isa == Isa::kAvx2) quantize_act_q8_k_avx2(x, dst, n_in);
      else quantize_act_q8_k_scalar(x, dst, n_in);
      return;
  }
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

const GemmKernel* gemm_kernel(DType weight, Isa isa) {
  static const GemmKernel scalar[] = {
      {ActFormat::kQ8_0, kQK8_0, gemm_scalar<vec_dot_q8_0_scalar>},
      {ActFormat::kQ8_0, kQK4_0, gemm_scalar<vec_dot_q4_0_scalar>},
      {ActFormat::kQ8_0, kQK5_0, gemm_scalar<vec_dot_q5_0_scalar>},
      {ActFormat::kQ8_K, kQK_K, gemm_scalar<vec_dot_q4_k_scalar>},
      {ActFormat::kQ8_K, kQK_K, gemm_scalar<vec_dot_q5_k_scalar>},
      {ActFormat::kQ8_K, kQK_K, gemm_scalar<vec_dot_q6_k_scalar>},
      {ActFormat::kF32, 1, gemm_scalar<vec_dot_f16_scalar>},
      {ActFormat::kF32, 1, gemm_scalar<vec_dot_bf16_scalar>},
      {ActFormat::kQ8_0, kNf4Block, gemm_scalar<vec_dot_nf4_scalar>},
      {ActFormat::kQ8_0, kQK8_0, gemm_scalar<vec_dot_i8_rows_scalar>},
  };
  static const bool vnni = cpu_has_avx_vnni();
  static const GemmKernel avx512[] = {
      {ActFormat::kQ8_0, kQK8_0, gemm_q8_0_avx512}, {ActFormat::kQ8_0, kQK4_0, gemm_q4_0_avx512},
      {ActFormat::kQ8_0, kQK5_0, gemm_q5_0_avx512}, {ActFormat::kQ8_K, kQK_K, gemm_q4_k_avx512},
      {ActFormat::kQ8_K, kQK_K, gemm_q5_k_avx512},  {ActFormat::kQ8_K, kQK_K, gemm_q6_k_avx512},
      {ActFormat::kF32, 1, gemm_f16_avx2},           {ActFormat::kF32, 1, gemm_bf16_avx2},
      {ActFormat::kQ8_0, kNf4Block, gemm_nf4_avx512}, {ActFormat::kQ8_0, kQK8_0, gemm_i8_rows_avx512},
  };
  static const GemmKernel avx2[] = {
      {ActFormat::kQ8_0, kQK8_0, vnni ? gemm_q8_0_avxvnni : gemm_q8_0_avx2},
      {ActFormat::kQ8_0, kQK4_0, vnni ? gemm_q4_0_avxvnni : gemm_q4_0_avx2},
      {ActFormat::kQ8_0, kQK5_0, vnni ? gemm_q5_0_avxvnni : gemm_q5_0_avx2}, {ActFormat::kQ8_K, kQK_K, vnni ? gemm_q4_k_avxvnni : gemm_q4_k_avx2},
      {ActFormat::kQ8_K, kQK_K, vnni ? gemm_q5_k_avxvnni : gemm_q5_k_avx2},
      {ActFormat::kQ8_K, kQK_K, vnni ? gemm_q6_k_avxvnni : gemm_q6_k_avx2},
      {ActFormat::kF32, 1, gemm_f16_avx2},        {ActFormat::kF32, 1, gemm_bf16_avx2},
      {ActFormat::kQ8_0, kNf4Block, gemm_nf4_avx2}, {ActFormat::kQ8_0, kQK8_0, gemm_i8_rows_avx2},
  };
  int index;
  switch (weight) {
    case DType::Q8_0: index = 0; break;
    case DType::Q4_0: index = 1; break;
    case DType::Q5_0: index = 2; break;
    case DType::Q4_K: index = 3; break;
    case DType::Q5_K: index = 4; break;
    case DType::Q6_K: index = 5; break;
    case DType::F16: index = 6; break;
    case DType::BF16: index = 7; break;
    case DType::NF4: index = 8; break;
    case DType::I8_ROWS: index = 9; break;
    default: return nullptr;
  }
  if (isa == Isa::kScalar) return &scalar[index];
  return cpu_has_avx512_vnni() ? &avx512[index] : &avx2[index];
}

}  // namespace ridge::kernels
