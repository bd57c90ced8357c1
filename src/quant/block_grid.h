// A GGUF quant block seen as a grid: once a block's parameters (scales, mins) are chosen,
// each element is one integer code, and its value is what the format's dequantizer
// computes from it. GPTQ and importance-weighted rounding choose the parameters first and
// then round each element onto its grid, so they need exactly this: read and write one
// element's code, and its value (bit-exact with dequantize_row).
//
//   const BlockGrid* g = block_grid(DType::Q4_K);          // null: not a block-grid format
//   quantize_row(DType::Q4_K, x, block, 256);              // parameters (and codes) fitted to x
//   float v;
//   const int32_t code = g->nearest(block, j, x_new, &v);  // round element j onto the grid
//   g->set_code(block, j, code);
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace ridge::quant {

struct BlockGrid {
  DType type;
  int64_t block_size;   // elements per block
  size_t block_bytes;
  int32_t code_min, code_max;
  // The value element j (0 .. block_size - 1) takes with this code, as dequantize_row
  // computes it.
  float (*value)(const uint8_t* block, int j, int32_t code);
  int32_t (*get_code)(const uint8_t* block, int j);
  void (*set_code)(uint8_t* block, int j, int32_t code);
  // The code whose value is nearest x (ties to the lower code); its value in *value_out.
  int32_t nearest(const uint8_t* block, int j, float x, float* value_out) const;
};

// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; null for any other type.
const BlockGrid* block_grid(DType type);

}  // namespace ridge::quant
