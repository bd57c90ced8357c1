// GPTQ (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization for Generative
// Pre-trained Transformers") into GGUF block types. For a weight matrix W [n_rows][n_cols]
// and its layer's calibration inputs X (rows of n_cols), the Hessian of the output error
// ||X W^T - X Q^T||^2 is H = 2 X^T X. Columns are quantized in order; after each, the
// rounding error is spread over the columns not yet quantized, weighted by the upper
// Cholesky factor of H^-1 (with dampening lambda * mean(diag H) on the diagonal), so later
// columns compensate. Updates beyond the current block of columns are applied lazily, one
// matrix product per block.
//
// The GGUF grid: a format's block (32 values, or a 256-value K-quant super-block) of a row
// gets its parameters (scales, mins) when GPTQ reaches its first column, fitted to the
// error-corrected values by the format's importance-weighted search with diag H as the
// weights (or by its reference quantizer, weighted_fit = false); then each of its columns
// is rounded onto that grid (quant/block_grid.h). The result is an ordinary block of the type,
// which every engine reads.
//
//   Hessian h(n_cols);
//   h.add(x.data(), n_tokens);                                    // H += X^T X, per batch
//   gptq_quantize(DType::Q4_0, w.data(), n_rows, n_cols, h, {}, out.data());
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace ridge::quant {

// X^T X accumulated over calibration rows (single precision, upper triangle).
class Hessian {
 public:
  explicit Hessian(int64_t n);
  void add(const float* x, int64_t n_rows);  // x: [n_rows][n]
  int64_t n() const { return n_; }
  int64_t samples() const { return samples_; }
  float at(int64_t i, int64_t j) const { return i <= j ? h_[static_cast<size_t>(i * n_ + j)] : h_[static_cast<size_t>(j * n_ + i)]; }

 private:
  int64_t n_ = 0, samples_ = 0;
  std::vector<float> h_;  // [n][n], upper triangle valid
};

struct GptqOptions {
  double damp = 0.01;          // lambda: fraction of mean(diag H) added to the diagonal
  int32_t block_columns = 128; // lazy-update block; raised to the format's block if larger
  bool act_order = false;      // quantize the format's blocks in order of decreasing
                               // importance (sum of diag H): GPTQ's act-order within what
                               // the block layout allows (columns of a block stay together)
  bool weighted_fit = true;    // fit each block's parameters (scales, mins) with diag H as
                               // the columns' importance (core/quant_weighted.h's searches,
                               // as an imatrix weighs them) rather than by the format's
                               // reference round-to-nearest rule; Q8_0 has no weighted fit
};

// Quantizes w (f32, [n_rows][n_cols], n_cols a multiple of the type's block) into
// n_rows rows of `type` at out (n_rows * row_size(type, n_cols) bytes). The type must have
// a block grid (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K). Throws ridge::Error for
// another type, mismatched sizes, or a Hessian whose factorization fails even after raising
// the dampening a hundredfold.
void gptq_quantize(DType type, const float* w, int64_t n_rows, int64_t n_cols, const Hessian& h,
                   const GptqOptions& options, uint8_t* out);

// sum over calibration rows of ||x W^T - x Q^T||^2 / ||x W^T||^2 as H gives it:
// trace((W - Q) H (W - Q)^T) / trace(W H W^T), for judging a quantization (w, q [n_rows][n_cols]).
double relative_output_error(const float* w, const float* q, int64_t n_rows, int64_t n_cols, const Hessian& h);

}  // namespace ridge::quant
