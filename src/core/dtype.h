// Element types of tensors, numbered exactly as GGUF/ggml numbers them, and the trait
// table that says how each is laid out (block size, bytes per block) and converted.
//
//   const TypeTraits& t = type_traits(DType::Q4_K);   // t.block_size == 256, t.type_size == 144
//   size_t bytes = row_size(DType::Q4_K, 4096);        // bytes of one 4096-wide row
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ridge {

enum class DType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3,
  // 4 and 5 were Q4_2 and Q4_3, removed from ggml.
  Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21,
  IQ2_S = 22, IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28,
  IQ1_M = 29, BF16 = 30,
  // 31..33 and 36..38 were repacked Q4_0/IQ4_NL layouts, removed from ggml.
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41,
  // Runtime-only formats, never in a GGUF file: weights converted at load time
  // (`--weights nf4|int8`, core/quant_bnb.h). Each row starts with a header.
  NF4 = 1000,      // bitsandbytes NF4: blocks of 64, double-quantized absmax scales
  I8_ROWS = 1001,  // LLM.int8 weights: one absmax scale per row, int8 values
  // Q4_K repacked at load for the matrix-vector kernels (kernels/gemm/repack.h): the
  // blocks of 16 rows interleaved, 144 bytes per row per block as in Q4_K. Its rows are
  // not contiguous, so it has no row-wise to_float: kernels/gemm/repack.h unpacks rows.
  Q4_K_R16 = 1002,
};

// Converts n elements (n a multiple of block_size) of a quantized row to float.
using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
// Quantizes n floats (n a multiple of block_size) into blocks; the reference (round-to-
// nearest) quantizer for the type.
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);

struct TypeTraits {
  std::string_view name;    // as ggml spells it: "q4_K", "f16", ...
  int64_t block_size = 0;   // elements per block
  size_t type_size = 0;     // bytes per block
  ToFloatFn to_float = nullptr;      // null: we cannot dequantize this type (yet)
  FromFloatFn from_float = nullptr;  // null: we cannot quantize to this type
  // Bytes before a row's blocks (the runtime formats' per-row statistics; 0 for every
  // GGUF type). With a header, to_float and from_float convert exactly one row.
  size_t row_header = 0;
};

constexpr uint32_t kDTypeCount = 42;
// The runtime-only formats' ids: [kRuntimeDTypeFirst, kRuntimeDTypeFirst + kRuntimeDTypeCount).
constexpr uint32_t kRuntimeDTypeFirst = static_cast<uint32_t>(DType::NF4);
constexpr uint32_t kRuntimeDTypeCount = 3;

// Dense indices for tables indexed by type (the kernels' per-ISA tables): the GGUF ids
// [0, kDTypeCount), then the runtime-only formats. kDTypeSlots for any other id.
constexpr uint32_t kDTypeSlots = kDTypeCount + kRuntimeDTypeCount;
constexpr uint32_t dtype_slot(DType type) {
  const uint32_t id = static_cast<uint32_t>(type);
  if (id < kDTypeCount) return id;
  if (id >= kRuntimeDTypeFirst && id - kRuntimeDTypeFirst < kRuntimeDTypeCount) return kDTypeCount + id - kRuntimeDTypeFirst;
  return kDTypeSlots;
}

// Traits of a known type (GGUF or runtime-only); the returned entry has block_size == 0
// for unknown ids.
const TypeTraits& type_traits(DType type);
// A type id a GGUF file may use (the runtime-only formats are not).
bool is_known_dtype(uint32_t id);
// For an id is_known_dtype refuses, the rest of an error message: the id, the type's
// name where one is known (a layout removed from ggml, an ik_llama.cpp type), why ridge
// cannot read it and what to do instead:
//   "31 (Q4_0_4_4) is an interleaved Q4_0 layout removed from llama.cpp ...; re-quantize ..."
std::string unknown_dtype_explanation(uint32_t id);
std::string_view dtype_name(DType type);
// Parses a GGUF type's name as ggml spells it, case-insensitively ("Q4_K", "q4_k", "f16").
std::optional<DType> dtype_from_name(std::string_view name);
// Bytes of a row of n elements (header included); n must be a multiple of the block size.
size_t row_size(DType type, int64_t n);

}  // namespace ridge
