// Importance-weighted quantizers (llama.cpp's imatrix): the block formats of core/quant.h,
// with each column's importance (the mean square of the activations that multiply it)
// weighting the fit of scales and codes, as ggml's quantize_q*_impl do, so that the bytes
// match llama-quantize --imatrix. Q8_0 and the float types ignore importance (as in ggml);
// null importance gives the reference quantizer's bytes.
//
//   std::vector<float> importance = ...;               // [n] per column, >= 0
//   quantize_row_weighted(DType::Q4_K, row, out, n, importance.data());
//
// With importance the fit is a different search from the reference's, not the reference
// with weights: all-equal importance does not reproduce the reference bytes (nor does it
// in ggml). Only the importance ratios matter; scaling it by a power of two changes nothing.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace ridge {

// Whether `type`'s quantizer uses importance: Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K.
bool quantizer_uses_importance(DType type);

// One row of n values (importance: [n], or null). For the types ggml quantizes without
// importance (Q8_0, Q8_1, Q8_K, F32, F16, BF16) the reference runs; throws ridge::Error
// for a type ggml weights but ridge has no weighted quantizer for (Q2_K, Q3_K), and as
// quantize_row does for n not a whole number of blocks.
void quantize_row_weighted(DType type, const float* src, void* dst, int64_t n, const float* importance);

// The per-type weighted quantizers; importance non-null, n a multiple of the block size.
// Q4_0/Q4_1/Q5_0/Q5_1 weigh value x of the row by importance * sqrt(sigma2 + x^2), sigma2
// the row's mean square; Q4_K/Q5_K the same with sigma2 twice the super-block's; Q6_K by
// the importance alone.
void quantize_row_q4_0_weighted(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_q4_1_weighted(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_q5_0_weighted(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_q5_1_weighted(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_q4_k_weighted(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_q5_k_weighted(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_q6_k_weighted(const float* src, void* dst, int64_t n, const float* importance);

namespace quant_k {

// Searches of the weighted quantizers (internal to core/quant*.cpp; the unweighted ones are
// in core/quant_k_search.h).

// Symmetric codes in 0..2*nmax-1 (value ~ scale * (code - nmax)) weighted by `weights`,
// trying 19 scales around nmax / max|x|; returns the weighted least-squares scale. With
// weights x^2 this is fit_symmetric_scale. (ggml: make_qx_quants, rmse_type 1, with
// quant weights.)
float fit_symmetric_scale_weighted(int n, int nmax, const float* x, const float* weights, int8_t* codes);

// Non-negative values (a super-block's group scales or mins) as codes 0..nmax times one
// scale: tries 9 scales around nmax / max x for the least weighted squared error, then
// moves codes one at a time while the weighted fit improves; returns the least-squares
// scale. (ggml: make_qp_quants.)
float fit_positive_scale(int n, int nmax, const float* x, const float* weights, uint8_t* codes);

}  // namespace quant_k
}  // namespace ridge
