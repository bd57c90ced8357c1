#include "model/families.h"

#include <array>

namespace ridge {

namespace {

constexpr std::string_view kLlamaReads[] = {"attention.sliding_window"};
constexpr std::string_view kGemma3Reads[] = {"attention.sliding_window", "attn_logit_softcapping",
                                             "final_logit_softcapping"};

}  // namespace

const FamilyTraits* find_family(std::string_view arch) {
  static const std::array<FamilyTraits, 5> families = {{
      {"llama", configure_llama, kLlamaReads},
      {"mistral", configure_llama, kLlamaReads},
      {"qwen2", configure_qwen2},
      {"qwen3", configure_qwen3},
      {"gemma3", configure_gemma3, kGemma3Reads},
  }};
  for (const FamilyTraits& f : families)
    if (f.arch == arch) return &f;
  return nullptr;
}

}  // namespace ridge
