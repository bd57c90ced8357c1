#include "core/dtype.h"

#include <array>
#include <cassert>
#include <cctype>

#include "core/error.h"

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

// Type ids that GGUF files carry but ridge cannot read, each with its name and where it
// comes from, so a refusal can say what the file holds and what to do (ggml.h of
// llama.cpp and of ik_llama.cpp).
enum class ForeignOrigin {
  kRemovedLegacy,       // Q4_2/Q4_3, removed from ggml in 2023
  kRemovedInterleaved,  // the Q4_0/IQ4_NL interleaved layouts, removed in favour of repacking at load
  kIkLlama,             // ik_llama.cpp's own types
};

struct ForeignType {
  uint32_t id;
  std::string_view name;
  ForeignOrigin origin;
  std::string_view same_size_type = {};  // the interleaved layouts: the type they repacked
};

constexpr ForeignType kForeignTypes[] = {
    {4, "Q4_2", ForeignOrigin::kRemovedLegacy},
    {5, "Q4_3", ForeignOrigin::kRemovedLegacy},
    {31, "Q4_0_4_4", ForeignOrigin::kRemovedInterleaved, "Q4_0"},
    {32, "Q4_0_4_8", ForeignOrigin::kRemovedInterleaved, "Q4_0"},
    {33, "Q4_0_8_8", ForeignOrigin::kRemovedInterleaved, "Q4_0"},
    {36, "IQ4_NL_4_4", ForeignOrigin::kRemovedInterleaved, "IQ4_NL"},  // also ik_llama.cpp's I2_S
    {37, "IQ4_NL_4_8", ForeignOrigin::kRemovedInterleaved, "IQ4_NL"},
    {38, "IQ4_NL_8_8", ForeignOrigin::kRemovedInterleaved, "IQ4_NL"},
    {97, "Q8_0_X4", ForeignOrigin::kIkLlama},
    {98, "Q8_1_X4", ForeignOrigin::kIkLlama},
    {99, "Q8_2_X4", ForeignOrigin::kIkLlama},
    {133, "Q6_0", ForeignOrigin::kIkLlama},
    {134, "IQ1_BN", ForeignOrigin::kIkLlama},
    {135, "IQ2_BN", ForeignOrigin::kIkLlama},
    {136, "Q8_K64", ForeignOrigin::kIkLlama},
    {137, "IQ2_K", ForeignOrigin::kIkLlama},
    {138, "IQ3_K", ForeignOrigin::kIkLlama},
    {139, "IQ4_K", ForeignOrigin::kIkLlama},
    {140, "IQ5_K", ForeignOrigin::kIkLlama},
    {141, "IQ6_K", ForeignOrigin::kIkLlama},
    {142, "IQ2_TN", ForeignOrigin::kIkLlama},
    {143, "IQ1_TN", ForeignOrigin::kIkLlama},
    {144, "IQ4_KS", ForeignOrigin::kIkLlama},
    {145, "IQ2_KS", ForeignOrigin::kIkLlama},
    {146, "IQ4_KSS", ForeignOrigin::kIkLlama},
    {147, "Q8_K16", ForeignOrigin::kIkLlama},
    {148, "Q8_K32", ForeignOrigin::kIkLlama},
    {149, "Q8_KR8", ForeignOrigin::kIkLlama},
    {150, "Q8_K128", ForeignOrigin::kIkLlama},
    {151, "Q8_KV", ForeignOrigin::kIkLlama},
    {152, "IQ5_KS", ForeignOrigin::kIkLlama},
    {153, "IQ2_KT", ForeignOrigin::kIkLlama},
    {154, "IQ3_KT", ForeignOrigin::kIkLlama},
    {155, "IQ4_KT", ForeignOrigin::kIkLlama},
    {156, "IQ3_KS", ForeignOrigin::kIkLlama},
    {157, "IQ2_KL", ForeignOrigin::kIkLlama},
    {158, "IQ1_KT", ForeignOrigin::kIkLlama},
    {202, "Q4_0_R8", ForeignOrigin::kIkLlama},
    {206, "Q5_0_R4", ForeignOrigin::kIkLlama},
    {208, "Q8_0_R8", ForeignOrigin::kIkLlama},
    {210, "Q2_K_R4", ForeignOrigin::kIkLlama},
    {211, "Q3_K_R4", ForeignOrigin::kIkLlama},
    {212, "Q4_K_R4", ForeignOrigin::kIkLlama},
    {213, "Q5_K_R4", ForeignOrigin::kIkLlama},
    {214, "Q6_K_R4", ForeignOrigin::kIkLlama},
    {216, "IQ2_XXS_R4", ForeignOrigin::kIkLlama},
    {217, "IQ2_XS_R4", ForeignOrigin::kIkLlama},
    {218, "IQ3_XXS_R4", ForeignOrigin::kIkLlama},
    {219, "IQ1_S_R4", ForeignOrigin::kIkLlama},
    {220, "IQ4_NL_R4", ForeignOrigin::kIkLlama},
    {221, "IQ3_S_R4", ForeignOrigin::kIkLlama},
    {222, "IQ2_S_R4", ForeignOrigin::kIkLlama},
    {223, "IQ4_XS_R8", ForeignOrigin::kIkLlama},
    {229, "IQ1_M_R4", ForeignOrigin::kIkLlama},
    {230, "BF16_R16", ForeignOrigin::kIkLlama},
    {233, "Q6_0_R4", ForeignOrigin::kIkLlama},
    {335, "IQ2_BN_R4", ForeignOrigin::kIkLlama},
    {337, "IQ2_K_R4", ForeignOrigin::kIkLlama},
    {338, "IQ3_K_R4", ForeignOrigin::kIkLlama},
    {339, "IQ4_K_R4", ForeignOrigin::kIkLlama},
    {340, "IQ5_K_R4", ForeignOrigin::kIkLlama},
    {344, "IQ4_KS_R4", ForeignOrigin::kIkLlama},
    {398, "Q8_KV_R8", ForeignOrigin::kIkLlama},
    {399, "Q8_K_R8", ForeignOrigin::kIkLlama},
};

// ik_llama.cpp numbers its own types from here up; mainline stays below.
constexpr uint32_t kIkLlamaFirstId = 133;

constexpr std::string_view kUseMainline =
    "this is an ik_llama.cpp type, which mainline llama.cpp and ridge do not read; use a mainline GGUF of "
    "the model, or re-quantize the F16/BF16 file with mainline llama-quantize";

}  // namespace

std::string unknown_dtype_explanation(uint32_t id) {
  if (is_known_dtype(id)) return str_cat(id, " (", type_traits(static_cast<DType>(id)).name, ") is a known type");
  for (const ForeignType& f : kForeignTypes) {
    if (f.id != id) continue;
    switch (f.origin) {
      case ForeignOrigin::kRemovedLegacy:
        return str_cat(id, " (", f.name, ") was removed from ggml in 2023; convert the model again with a "
                       "current llama.cpp");
      case ForeignOrigin::kRemovedInterleaved:
        return str_cat(id, " (", f.name, ") is an interleaved layout removed from llama.cpp, which now repacks "
                       "Q4_0 and IQ4_NL at load time; re-quantize with llama-quantize from the F16/BF16 file "
                       "(to ", f.same_size_type, " for the same size)",
                       id == 36 ? " (in an ik_llama.cpp file, 36 is I2_S, BitNet's ternary type: use a "
                                  "mainline TQ1_0 or TQ2_0 GGUF)"
                                : "");
      case ForeignOrigin::kIkLlama:
        return str_cat(id, " (", f.name, "): ", kUseMainline);
    }
  }
  if (id >= kRuntimeDTypeFirst && id - kRuntimeDTypeFirst < kRuntimeDTypeCount)
    return str_cat(id, " (", type_traits(static_cast<DType>(id)).name,
                   ") is a format ridge makes at load time and never reads from a file");
  if (id >= kIkLlamaFirstId)
    return str_cat(id, " is not a llama.cpp type; ids from ", kIkLlamaFirstId,
                   " up are where ik_llama.cpp puts its own types: if the file came from ik_llama.cpp, use a "
                   "mainline GGUF of the model");
  return str_cat(id, " is not a type ridge knows (it reads ggml's ids 0..", kDTypeCount - 1,
                 "); a newer llama.cpp or a fork may have written it: use a GGUF from mainline llama.cpp");
}

// Defined by the quant formats (core/quant.cpp): fills to_float/from_float.
void register_quant_functions(std::array<TypeTraits, kDTypeCount>& table);
// bitsandbytes' runtime formats (core/quant_bnb.cpp): NF4, I8_ROWS.
std::array<TypeTraits, 2> bnb_type_traits();

// The runtime-only formats in DType order from DType::NF4: bitsandbytes' two, then the
// interleaved Q4_K, which only the kernels read or write (kernels/gemm/repack.h).
static std::array<TypeTraits, kRuntimeDTypeCount> runtime_type_traits() {
  const std::array<TypeTraits, 2> bnb = bnb_type_traits();
  return {bnb[0], bnb[1], TypeTraits{"q4_K_r16", 256, 144, nullptr, nullptr, 0}};
}

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
