// Scalar references of the integer GEMM for the runtime weight formats NF4 and I8_ROWS
// (core/quant_bnb.h) against Q8_0 activations. The fast kernels (gemm/avx2_bnb.cpp,
// gemm/avx512_bnb.cpp) reproduce these float operations exactly, so their outputs are
// bit-identical; only the order of the per-group fmas matters (integer sums are exact).
//
//   float y = vec_dot_nf4_scalar(n_in, nf4_row_bytes, q8_0_act_row);
#include "kernels/gemm/table.h"

#include <cmath>
#include <cstring>

#include "core/quant_bnb.h"

namespace ridge::kernels {

namespace {

constexpr int64_t kGroup = 32;  // elements per activation scale (ActFormat::kQ8_0)

}  // namespace

// For each block b and its two groups g = 2b (low nibbles, elements 0..31 of the block)
// and g = 2b + 1 (high nibbles, elements 32..63), in that order:
//   absmax = fma(dynamic_map[code_b], absmax2, offset)
//   sumi   = sum nf4_values_i8[nibble] * q_act            (exact int32)
//   sum    = fma(float(sumi), (absmax * (1 / 127.f)) * d_act[g], sum)
float vec_dot_nf4_scalar(int64_t n, const uint8_t* w, const uint8_t* act) {
  const Nf4Row row = nf4_row(w, n);
  const std::array<float, 256>& map = dynamic_map();
  const std::array<int8_t, 16>& values = nf4_values_i8();
  const auto* q = reinterpret_cast<const int8_t*>(act);
  const auto* d = reinterpret_cast<const float*>(act + n);
  float sum = 0;
  for (int64_t b = 0; b < n / kNf4Block; ++b) {
    const float scale = nf4_absmax(row, map, b) * (1.0f / 127.0f);
    const uint8_t* block = row.qs + b * 32;
    for (int half = 0; half < 2; ++half) {
      const int64_t g = 2 * b + half;
      const int shift = 4 * half;
      int32_t sumi = 0;
      for (int l = 0; l < kGroup; ++l) sumi += values[(block[l] >> shift) & 0xf] * q[g * kGroup + l];
      sum = std::fma(static_cast<float>(sumi), scale * d[g], sum);
    }
  }
  return sum;
}

// For each group g in order: sumi = sum q_w * q_act (exact int32);
// sum = fma(float(sumi), d_act[g], sum). The row scale applies once: sum * scale.
float vec_dot_i8_rows_scalar(int64_t n, const uint8_t* w, const uint8_t* act) {
  float scale;
  std::memcpy(&scale, w, sizeof(scale));
  const auto* qw = reinterpret_cast<const int8_t*>(w + sizeof(float));
  const auto* q = reinterpret_cast<const int8_t*>(act);
  const auto* d = reinterpret_cast<const float*>(act + n);
  float sum = 0;
  for (int64_t g = 0; g < n / kGroup; ++g) {
    int32_t sumi = 0;
    for (int l = 0; l < kGroup; ++l) sumi += qw[g * kGroup + l] * q[g * kGroup + l];
    sum = std::fma(static_cast<float>(sumi), d[g], sum);
  }
  return sum * scale;
}

}  // namespace ridge::kernels
