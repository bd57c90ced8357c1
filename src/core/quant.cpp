// Registers the quant formats' conversion functions in the dtype trait table, the
// checked row entry points, and the plain float formats (f32, f16, bf16).
#include "core/quant.h"

#include <array>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"

namespace ridge {

void register_quant_functions(std::array<TypeTraits, kDTypeCount>& table) {
  auto set = [&](DType type, ToFloatFn to_float, FromFloatFn from_float) {
    TypeTraits& t = table[static_cast<uint32_t>(type)];
    t.to_float = to_float;
    t.from_float = from_float;
  };
  set(DType::F32, dequantize_row_f32, quantize_row_f32);
  set(DType::F16, dequantize_row_f16, quantize_row_f16);
  set(DType::BF16, dequantize_row_bf16, quantize_row_bf16);
  set(DType::Q4_0, dequantize_row_q4_0, quantize_row_q4_0);
  set(DType::Q4_1, dequantize_row_q4_1, quantize_row_q4_1);
  set(DType::Q5_0, dequantize_row_q5_0, quantize_row_q5_0);
  set(DType::Q5_1, dequantize_row_q5_1, quantize_row_q5_1);
  set(DType::Q8_0, dequantize_row_q8_0, quantize_row_q8_0);
  set(DType::Q8_1, dequantize_row_q8_1, quantize_row_q8_1);
  set(DType::Q2_K, dequantize_row_q2_k, quantize_row_q2_k);
  set(DType::Q3_K, dequantize_row_q3_k, quantize_row_q3_k);
  set(DType::Q4_K, dequantize_row_q4_k, quantize_row_q4_k);
  set(DType::Q5_K, dequantize_row_q5_k, quantize_row_q5_k);
  set(DType::Q6_K, dequantize_row_q6_k, quantize_row_q6_k);
  set(DType::Q8_K, dequantize_row_q8_k, quantize_row_q8_k);
  set(DType::IQ4_NL, dequantize_row_iq4_nl, nullptr);
  set(DType::IQ4_XS, dequantize_row_iq4_xs, nullptr);
  set(DType::IQ2_XXS, dequantize_row_iq2_xxs, nullptr);
  set(DType::IQ2_XS, dequantize_row_iq2_xs, nullptr);
  set(DType::IQ2_S, dequantize_row_iq2_s, nullptr);
  set(DType::IQ3_XXS, dequantize_row_iq3_xxs, nullptr);
  set(DType::IQ3_S, dequantize_row_iq3_s, nullptr);
  set(DType::IQ1_S, dequantize_row_iq1_s, nullptr);
  set(DType::IQ1_M, dequantize_row_iq1_m, nullptr);
  set(DType::MXFP4, dequantize_row_mxfp4, quantize_row_mxfp4);
  set(DType::NVFP4, dequantize_row_nvfp4, nullptr);
  set(DType::TQ1_0, dequantize_row_tq1_0, quantize_row_tq1_0);
  set(DType::TQ2_0, dequantize_row_tq2_0, quantize_row_tq2_0);
}

namespace {

const TypeTraits& checked_traits(const char* what, DType type, int64_t n) {
  const TypeTraits& t = type_traits(type);
  if (t.block_size == 0)
    throw Error(str_cat(what, ": unknown type id ", static_cast<uint32_t>(type)));
  if (n < 0 || n % t.block_size != 0)
    throw Error(str_cat(what, ": ", n, " elements is not a whole number of ", t.name,
                        " blocks of ", t.block_size));
  return t;
}

}  // namespace

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const TypeTraits& t = checked_traits("dequantize_row", type, n);
  if (t.to_float == nullptr)
    throw Error(str_cat("dequantize_row: dequantizing type ", t.name, " is not supported"));
  t.to_float(src, dst, n);
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  const TypeTraits& t = checked_traits("quantize_row", type, n);
  if (t.from_float == nullptr)
    throw Error(str_cat("quantize_row: quantizing to type ", t.name, " is not supported"));
  t.from_float(src, dst, n);
}

void dequantize_row_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void dequantize_row_f16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
}

void dequantize_row_bf16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
}

void quantize_row_f32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void quantize_row_f16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
}

void quantize_row_bf16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
}

}  // namespace ridge
