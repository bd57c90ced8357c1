#include "model/families.h"

#include <array>

namespace ridge {

const FamilyTraits* find_family(std::string_view arch) {
  static const std::array<FamilyTraits, 5> families = {{
      {"llama", configure_llama},
      {"mistral", configure_llama},
      {"qwen2", configure_qwen2},
      {"qwen3", configure_qwen3},
      {"gemma3", configure_gemma3},
  }};
  for (const FamilyTraits& f : families)
    if (f.arch == arch) return &f;
  return nullptr;
}

}  // namespace ridge
