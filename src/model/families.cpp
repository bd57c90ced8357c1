#include "model/families.h"

#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"
#include "gguf/gguf.h"

namespace ridge {

namespace {

constexpr std::string_view kLlamaReads[] = {"attention.sliding_window", "expert_count", "expert_used_count"};
constexpr std::string_view kGemmaReads[] = {"attention.sliding_window", "attn_logit_softcapping",
                                            "final_logit_softcapping", "attention.scale"};
constexpr std::string_view kPhi3Reads[] = {"attention.sliding_window", "rope.scaling.attn_factor"};
constexpr std::string_view kMoeReads[] = {"expert_count", "expert_used_count"};
// llama.cpp's qwen35 graph applies no soft-capping (models/qwen35.cpp).
constexpr std::string_view kQwen35Ignores[] = {"attn_logit_softcapping", "final_logit_softcapping"};
// Its qwen35moe and qwen3next graphs route by softmax, renormalises the top k and runs one shared expert
// whatever the file says (models/qwen35moe.cpp), and so does ridge.
constexpr std::string_view kQwen35MoeIgnores[] = {"attn_logit_softcapping", "final_logit_softcapping",
                                                  "expert_weights_norm", "expert_gating_func",
                                                  "expert_shared_count"};

}  // namespace

std::span<const FamilyTraits> families() {
  static const std::array<FamilyTraits, 12> table = {{
      {"llama", configure_llama, kLlamaReads},
      {"mistral", configure_llama, kLlamaReads},
      {"qwen2", configure_qwen2},
      {"qwen3", configure_qwen3},
      {"qwen3moe", configure_qwen3moe, kMoeReads},
      {"qwen35", configure_qwen35, {}, kQwen35Ignores},
      {"qwen35moe", configure_qwen35moe, kMoeReads, kQwen35MoeIgnores},
      {"qwen3next", configure_qwen35moe, kMoeReads, kQwen35MoeIgnores},
      {"olmoe", configure_olmoe, kMoeReads},
      {"phi3", configure_phi3, kPhi3Reads},
      {"gemma2", configure_gemma2, kGemmaReads},
      {"gemma3", configure_gemma3, kGemmaReads},
  }};
  return table;
}

const FamilyTraits* find_family(std::string_view arch) {
  for (const FamilyTraits& f : families())
    if (f.arch == arch) return &f;
  return nullptr;
}

void check_implied_value(const gguf::File& f, const std::string& arch, std::string_view key, double implied) {
  if (!computation_key_set(f, arch, key)) return;
  const std::string name = str_cat(arch, ".", key);
  const double value = f.get_f64(name);
  // The file holds a float32; the family's value is computed in float32 too.
  if (std::fabs(value - implied) <= 1e-6 * std::fabs(implied)) return;
  throw Error(str_cat(f.name(), ": ", name, " is ", value, ", and ridge's ", arch, " model computes with ", implied,
                      " (what the family implies); refusing to run with another value"));
}

int32_t sliding_window(const gguf::File& f, const std::string& arch, bool required) {
  const std::string key = arch + ".attention.sliding_window";
  const int64_t window = f.get_i64(key, 0);
  if (window < 0 || (required && window == 0))
    throw Error(str_cat(f.name(), ": ", key, " is ", window == 0 ? "missing" : std::to_string(window),
                        "; it must be a positive number of tokens"));
  return window > std::numeric_limits<int32_t>::max() ? 0 : static_cast<int32_t>(window);
}

void configure_experts(const gguf::File& f, ModelConfig& c, bool norm) {
  const std::string p = c.arch + ".";
  if (!computation_key_set(f, c.arch, "expert_count")) return;  // absent or 0: a dense model
  c.n_expert = static_cast<int32_t>(f.get_u64(p + "expert_count"));
  c.n_expert_used = static_cast<int32_t>(f.get_u64(p + "expert_used_count"));
  // llama.cpp's saver writes expert_feed_forward_length 0 where the family takes the width
  // from feed_forward_length (Mixtral as llama): 0 is absent here too.
  const std::string width =
      f.get_u64(p + "expert_feed_forward_length", 0) > 0 ? "expert_feed_forward_length" : "feed_forward_length";
  c.n_ff_expert = static_cast<int32_t>(f.get_u64(p + width));
  c.expert_weights_norm = norm;
  if (c.n_expert < 1 || c.n_expert > 256 || c.n_expert_used < 1 || c.n_expert_used > c.n_expert || c.n_ff_expert < 1)
    throw Error(str_cat(f.name(), ": ", p, "expert_used_count ", c.n_expert_used, " of expert_count ", c.n_expert,
                        " (expert width ", c.n_ff_expert, ") is not a valid mixture of experts"));
}

}  // namespace ridge
