#include "core/quant_bnb.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dtype.h"

namespace ridge {

const std::array<float, 16>& nf4_values() {
  static const std::array<float, 16> values = {
      -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
      -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
      0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
      0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
  return values;
}

const std::array<int8_t, 16>& nf4_values_i8() {
  static const std::array<int8_t, 16> values = [] {
    std::array<int8_t, 16> v{};
    for (int k = 0; k < 16; ++k) v[k] = static_cast<int8_t>(std::lround(127.0 * nf4_values()[k]));
    return v;
  }();
  return values;
}

// create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for decade i of 7,
// the midpoints of 2^i + 1 points evenly spaced on [0.1, 1], times 10^(i - 6), both
// signs; then 0 and 1.
const std::array<float, 256>& dynamic_map() {
  static const std::array<float, 256> map = [] {
    std::vector<double> values;
    for (int i = 0; i < 7; ++i) {
      const int points = (1 << i) + 1;
      const double decade = std::pow(10.0, i - 6);
      for (int k = 0; k + 1 < points; ++k) {
        const double lo = 0.1 + 0.9 * k / (points - 1), hi = 0.1 + 0.9 * (k + 1) / (points - 1);
        values.push_back(decade * (lo + hi) / 2);
        values.push_back(-decade * (lo + hi) / 2);
      }
    }
    values.push_back(0.0);
    values.push_back(1.0);
    std::sort(values.begin(), values.end());
    std::array<float, 256> out{};
    for (size_t k = 0; k < out.size(); ++k) out[k] = static_cast<float>(values[k]);
    return out;
  }();
  return map;
}

Nf4Row nf4_row(const uint8_t* row, int64_t n) {
  Nf4Row r;
  std::memcpy(&r.absmax2, row, sizeof(float));
  std::memcpy(&r.offset, row + sizeof(float), sizeof(float));
  r.codes = row + 2 * sizeof(float);
  r.qs = r.codes + n / kNf4Block;
  return r;
}

namespace {

// The index of the value of `sorted` nearest to x (the lower one on a tie).
template <size_t N>
int nearest(const std::array<float, N>& sorted, float x) {
  const auto above = std::lower_bound(sorted.begin(), sorted.end(), x);
  if (above == sorted.begin()) return 0;
  if (above == sorted.end()) return static_cast<int>(N) - 1;
  const auto below = above - 1;
  return static_cast<int>((x - *below <= *above - x ? below : above) - sorted.begin());
}

}  // namespace

void quantize_row_nf4(const float* src, void* dst, int64_t n) {
  const int64_t nb = n / kNf4Block;
  auto* out = static_cast<uint8_t*>(dst);
  std::vector<float> absmax(static_cast<size_t>(nb));
  double mean = 0;
  for (int64_t b = 0; b < nb; ++b) {
    float amax = 0;
    for (int64_t i = 0; i < kNf4Block; ++i) amax = std::max(amax, std::fabs(src[b * kNf4Block + i]));
    absmax[b] = amax;
    mean += amax;
  }
  // Double quantization of the absmax values: centred on their mean, scaled into [-1, 1]
  // and rounded onto the dynamic map.
  const float offset = nb > 0 ? static_cast<float>(mean / static_cast<double>(nb)) : 0.0f;
  float absmax2 = 0;
  for (float a : absmax) absmax2 = std::max(absmax2, std::fabs(a - offset));
  std::memcpy(out, &absmax2, sizeof(float));
  std::memcpy(out + sizeof(float), &offset, sizeof(float));
  uint8_t* codes = out + 2 * sizeof(float);
  for (int64_t b = 0; b < nb; ++b)
    codes[b] = static_cast<uint8_t>(nearest(dynamic_map(), absmax2 > 0 ? (absmax[b] - offset) / absmax2 : 0.0f));
  // The values against their block's exact absmax, as bitsandbytes quantizes them
  // before compressing the statistics.
  uint8_t* qs = codes + nb;
  for (int64_t b = 0; b < nb; ++b) {
    const float inv = absmax[b] > 0 ? 1.0f / absmax[b] : 0.0f;
    uint8_t* block = qs + b * 32;
    for (int64_t l = 0; l < 32; ++l) {
      const int lo = nearest(nf4_values(), src[b * kNf4Block + l] * inv);
      const int hi = nearest(nf4_values(), src[b * kNf4Block + l + 32] * inv);
      block[l] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void dequantize_row_nf4(const void* src, float* dst, int64_t n) {
  const Nf4Row row = nf4_row(static_cast<const uint8_t*>(src), n);
  const std::array<float, 16>& v = nf4_values();
  for (int64_t b = 0; b < n / kNf4Block; ++b) {
    const float amax = nf4_absmax(row, dynamic_map(), b);
    const uint8_t* block = row.qs + b * 32;
    for (int64_t l = 0; l < 32; ++l) {
      dst[b * kNf4Block + l] = amax * v[block[l] & 0xf];
      dst[b * kNf4Block + l + 32] = amax * v[block[l] >> 4];
    }
  }
}

void quantize_row_i8_rows(const float* src, void* dst, int64_t n) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(src[i]));
  const float scale = amax / 127.0f;
  const float inv = amax > 0 ? 127.0f / amax : 0.0f;
  auto* out = static_cast<uint8_t*>(dst);
  std::memcpy(out, &scale, sizeof(float));
  auto* q = reinterpret_cast<int8_t*>(out + sizeof(float));
  for (int64_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(std::nearbyint(src[i] * inv));
}

void dequantize_row_i8_rows(const void* src, float* dst, int64_t n) {
  float scale;
  std::memcpy(&scale, src, sizeof(float));
  const auto* q = reinterpret_cast<const int8_t*>(static_cast<const uint8_t*>(src) + sizeof(float));
  for (int64_t i = 0; i < n; ++i) dst[i] = scale * static_cast<float>(q[i]);
}

// The runtime-only rows of the dtype trait table (core/dtype.cpp), from DType::NF4 on.
std::array<TypeTraits, 2> bnb_type_traits() {
  return {TypeTraits{"nf4", kNf4Block, 33, dequantize_row_nf4, quantize_row_nf4, 2 * sizeof(float)},
          TypeTraits{"i8_rows", 32, 32, dequantize_row_i8_rows, quantize_row_i8_rows, sizeof(float)}};
}

}  // namespace ridge
