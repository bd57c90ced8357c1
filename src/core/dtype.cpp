#include "core/dtype.h"

#include <array>
#include <cassert>
#include <cctype>

namespace ridge {
namespace {

// Block layouts as ggml defines them (ggml-common.h). Conversion functions are filled in
// by the quant formats that implement them (core/quant.h); a null entry means "not yet".
std::array<TypeTraits, kDTypeCount> make_table() {
  std::array<TypeTraits, kDTypeCount> t{};
  auto set = [&](DType d, std::string_view name, int64_t block, size_t bytes) {
    t[static_cast<uint32_t>(d)] = TypeTraits{name, block, bytes, nullptr, nullptr};
  };
  set(DType::F32, "f32", 1, 4);
  set(DType::F16, "f16", 1, 2);
  set(DType::Q4_0, "q4_0", 32, 18);
  set(DType::Q4_1, "q4_1", 32, 20);
  set(DType::Q5_0, "q5_0", 32, 22);
  set(DType::Q5_1, "q5_1", 32, 24);
  set(DType::Q8_0, "q8_0", 32, 34);
  set(DType::Q8_1, "q8_1", 32, 36);
  set(DType::Q2_K, "q2_K", 256, 84);
  set(DType::Q3_K, "q3_K", 256, 110);
  set(DType::Q4_K, "q4_K", 256, 144);
  set(DType::Q5_K, "q5_K", 256, 176);
  set(DType::Q6_K, "q6_K", 256, 210);
  set(DType::Q8_K, "q8_K", 256, 292);
  set(DType::IQ2_XXS, "iq2_xxs", 256, 66);
  set(DType::IQ2_XS, "iq2_xs", 256, 74);
  set(DType::IQ3_XXS, "iq3_xxs", 256, 98);
  set(DType::IQ1_S, "iq1_s", 256, 50);
  set(DType::IQ4_NL, "iq4_nl", 32, 18);
  set(DType::IQ3_S, "iq3_s", 256, 110);
  set(DType::IQ2_S, "iq2_s", 256, 82);
  set(DType::IQ4_XS, "iq4_xs", 256, 136);
  set(DType::I8, "i8", 1, 1);
  set(DType::I16, "i16", 1, 2);
  set(DType::I32, "i32", 1, 4);
  set(DType::I64, "i64", 1, 8);
  set(DType::F64, "f64", 1, 8);
  set(DType::IQ1_M, "iq1_m", 256, 56);
  set(DType::BF16, "bf16", 1, 2);
  set(DType::TQ1_0, "tq1_0", 256, 54);
  set(DType::TQ2_0, "tq2_0", 256, 66);
  set(DType::MXFP4, "mxfp4", 32, 17);
  set(DType::NVFP4, "nvfp4", 64, 36);
  set(DType::Q1_0, "q1_0", 128, 18);
  return t;
}

}  // namespace

// Defined by the quant formats (core/quant.cpp): fills to_float/from_float.
void register_quant_functions(std::array<TypeTraits, kDTypeCount>& table);
// The runtime-only formats (core/quant_bnb.cpp), in DType order from DType::NF4.
std::array<TypeTraits, kRuntimeDTypeCount> runtime_type_traits();

static const std::array<TypeTraits, kDTypeCount>& table() {
  static const std::array<TypeTraits, kDTypeCount> t = [] {
    auto made = make_table();
    register_quant_functions(made);
    return made;
  }();
  return t;
}

const TypeTraits& type_traits(DType type) {
  static const TypeTraits unknown{};
  static const std::array<TypeTraits, kRuntimeDTypeCount> runtime = runtime_type_traits();
  const uint32_t slot = dtype_slot(type);
  if (slot < kDTypeCount) return table()[slot];
  if (slot < kDTypeSlots) return runtime[slot - kDTypeCount];
  return unknown;
}

bool is_known_dtype(uint32_t id) { return id < kDTypeCount && table()[id].block_size > 0; }

std::string_view dtype_name(DType type) {
  const TypeTraits& t = type_traits(type);
  return t.block_size > 0 ? t.name : std::string_view("unknown");
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (uint32_t id = 0; id < kDTypeCount; ++id) {
    std::string_view n = table()[id].name;
    if (n.empty() || n.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < n.size() && same; ++i)
      same = std::tolower(static_cast<unsigned char>(n[i])) ==
             std::tolower(static_cast<unsigned char>(name[i]));
    if (same) return static_cast<DType>(id);
  }
  return std::nullopt;
}

size_t row_size(DType type, int64_t n) {
  const TypeTraits& t = type_traits(type);
  assert(t.block_size > 0 && n % t.block_size == 0);
  return t.row_header + static_cast<size_t>(n / t.block_size) * t.type_size;
}

}  // namespace ridge
