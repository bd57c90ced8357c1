// `ridge quantize`: a GGUF in, a GGUF of another type out, tensor by tensor. Every weight
// matrix is dequantized to f32 and quantized to the type the recipe picks (quant/recipe.h)
// with a MatrixQuantizer: the format's reference round-to-nearest quantizer by default, or
// what GPTQ/AWQ or an importance matrix (quant/imatrix.h) put in its place. Metadata is carried over (general.file_type set to the
// target); the output is written to a part file beside OUT (core/part_file.h) and renamed,
// so a failed run leaves no file and concurrent runs to one OUT each write a whole file.
//
//   QuantizeOptions o{.input = "f16.gguf", .output = "q4.gguf", .target = parse_quant_target("Q4_K_M")};
//   QuantizeReport r = quantize_model(o, [](const std::string& line) { std::fputs(line.c_str(), stderr); });
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "gguf/gguf.h"
#include "quant/recipe.h"

namespace ridge::quant {

// Quantizes one matrix: rows [n_rows][n_cols] of f32 into n_rows rows of `type`. Given
// the tensor's name so that a method can use what it learned about that matrix (an
// importance matrix, GPTQ's Hessian); `out` holds n_rows * row_size(type, n_cols) bytes.
using MatrixQuantizer = std::function<void(const std::string& name, DType type, const float* rows, int64_t n_rows,
                                           int64_t n_cols, uint8_t* out)>;

struct QuantizeOptions {
  std::string input;
  std::string output;
  QuantTarget target;
  int threads = 0;                  // 0: all cores
  MatrixQuantizer quantizer;        // null: the reference quantizer of each type
  bool imatrix = false;             // quantizer weighs by an importance matrix (recipe rules)
  // f32 values to use instead of the file's (AWQ's scaled matrices and norms): matrices
  // are quantized from these, other tensors written from them in their own type.
  const std::map<std::string, std::vector<float>>* overrides = nullptr;
  std::vector<gguf::KeyValue> extra_metadata;  // keys to add (method, calibration, imatrix)
};

struct QuantizeReport {
  uint64_t input_bytes = 0, output_bytes = 0;  // tensor data
  int32_t n_tensors = 0, n_quantized = 0;
  std::vector<std::string> fallbacks;          // the recipe's shape fallbacks
};

// Throws ridge::Error (input unreadable, output is the input, cannot write) naming the file.
QuantizeReport quantize_model(const QuantizeOptions& options, const std::function<void(const std::string&)>& progress);

// The reference quantizer of `type` over rows, threaded over rows.
void quantize_rows_reference(DType type, const float* rows, int64_t n_rows, int64_t n_cols, uint8_t* out,
                             int threads);

// The importance-weighted quantizer of `type` (core/quant_weighted.h) over rows: the rows
// are n_mat matrices of n_rows / n_mat rows each (the experts of a 3-D tensor), matrix m
// weighted by importance[m][0..n_cols). Threaded over rows.
void quantize_rows_weighted(DType type, const float* rows, int64_t n_rows, int64_t n_cols, const float* importance,
                            int64_t n_mat, uint8_t* out, int threads);

}  // namespace ridge::quant
