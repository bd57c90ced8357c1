// bitsandbytes' two weight formats, applied when a model is loaded (`--weights nf4|int8`)
// and never stored in GGUF: the scalar references of their layouts and conversions.
//
// NF4 (QLoRA, Dettmers et al. 2023): each block of 64 weights is scaled by its absmax
// into [-1, 1] and each value rounded to the nearest of 16 NormalFloat code points
// (quantiles of a normal distribution, exact zero included). Double quantization: the
// blocks' absmax values, less their mean, are quantized to 8 bits with bitsandbytes'
// signed dynamic map (create_dynamic_map: 7 decades of linearly spaced fractions) and
// one float scale. bitsandbytes groups 256 absmax values across the flattened tensor;
// ridge groups one row's blocks (a row's n_in / 64, at most a few hundred), so a row
// stays self-contained for the kernels. Bits per weight: 4 + 8 / 64 + 64 / n_in.
//   row: float absmax2, float offset, uint8 code[nb], then per block 32 bytes: byte l
//        holds element l (low nibble) and element l + 32 (high nibble).
//   absmax_b = fma(dynamic_map[code_b], absmax2, offset);  x = absmax_b * nf4[nibble]
//
// I8_ROWS (LLM.int8, Dettmers et al. 2022): vector-wise int8, one absmax scale per
// output row; the outlier half of LLM.int8 is in the activations (kernels/matmul.h).
//   row: float scale (absmax / 127), int8 q[n];  x = scale * q
//
//   std::vector<uint8_t> row(row_size(DType::NF4, 4096));
//   quantize_row_nf4(values, row.data(), 4096);
//   dequantize_row_nf4(row.data(), out, 4096);
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace ridge {

constexpr int64_t kNf4Block = 64;

// The 16 NF4 code points, ascending, nf4[7] == 0 (bitsandbytes' table).
const std::array<float, 16>& nf4_values();
// The NF4 code points in 1/127 units, rounded: what the integer kernels multiply (the
// rounding moves a value by at most 0.4% of its block's absmax).
const std::array<int8_t, 16>& nf4_values_i8();
// bitsandbytes' signed 8-bit dynamic map: 256 values in [-1, 1], ascending.
const std::array<float, 256>& dynamic_map();

// One row of NF4, viewed in place.
struct Nf4Row {
  float absmax2 = 0;
  float offset = 0;
  const uint8_t* codes = nullptr;  // [nb]
  const uint8_t* qs = nullptr;     // [nb][32]
};
Nf4Row nf4_row(const uint8_t* row, int64_t n);
// Block b's absmax as stored (map: dynamic_map()).
inline float nf4_absmax(const Nf4Row& row, const std::array<float, 256>& map, int64_t b) {
  return std::fma(map[row.codes[b]], row.absmax2, row.offset);
}

void quantize_row_nf4(const float* src, void* dst, int64_t n);
void dequantize_row_nf4(const void* src, float* dst, int64_t n);
void quantize_row_i8_rows(const float* src, void* dst, int64_t n);
void dequantize_row_i8_rows(const void* src, float* dst, int64_t n);

}  // namespace ridge
