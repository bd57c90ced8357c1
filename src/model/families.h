// The supported model families. Each family file (family_*.cpp) reads the metadata its
// architecture adds and sets the traits that differ from a plain Llama.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "model/config.h"

namespace ridge {

struct FamilyTraits {
  std::string_view arch;
  // Called after the common hyper-parameters are read; sets the family's traits.
  void (*configure)(const gguf::File& file, ModelConfig& config);
  // Of the metadata that changes what a model computes (kComputationKeys in config.cpp),
  // the keys, without the "<arch>." prefix, this family reads; the others are refused.
  std::span<const std::string_view> reads = {};
  // Of those keys, the ones llama.cpp's graph for this architecture never reads (its model
  // saver still writes them, e.g. qwen35.attn_logit_softcapping 50): ignored here too, so a
  // file computes as llama.cpp computes it.
  std::span<const std::string_view> ignores = {};
};

// Every family ridge runs, in one table: find_family and the list of supported
// architectures (ModelConfig::supported_architectures, the unknown-architecture error) read it.
std::span<const FamilyTraits> families();
const FamilyTraits* find_family(std::string_view arch);

// Whether the file sets <arch>.<key>, one of the metadata that changes what a model computes
// (kComputationKeys in config.cpp), to a value other than its neutral one. llama.cpp's model
// saver writes every hyper-parameter key, neutral values included (expert_count 0,
// attention.scale 0, ...), and llama.cpp reads a key at its neutral value as an absent one;
// so does ridge.
bool computation_key_set(const gguf::File& file, const std::string& arch, std::string_view key);

// A computation key the family fixes rather than reads (Gemma's attention.scale): absent,
// neutral, or the value the family implies (to float rounding) is accepted; any other value
// is an Error naming the key, as computing without it would be silently wrong.
void check_implied_value(const gguf::File& file, const std::string& arch, std::string_view key, double implied);

void configure_llama(const gguf::File& file, ModelConfig& config);
void configure_qwen2(const gguf::File& file, ModelConfig& config);
void configure_qwen3(const gguf::File& file, ModelConfig& config);
void configure_gemma3(const gguf::File& file, ModelConfig& config);
void configure_gemma2(const gguf::File& file, ModelConfig& config);
void configure_phi3(const gguf::File& file, ModelConfig& config);
void configure_qwen3moe(const gguf::File& file, ModelConfig& config);
void configure_olmoe(const gguf::File& file, ModelConfig& config);
void configure_qwen35(const gguf::File& file, ModelConfig& config);
void configure_qwen35moe(const gguf::File& file, ModelConfig& config);

// The mixture-of-experts hyper-parameters (<arch>.expert_count, expert_used_count, and the
// expert width: expert_feed_forward_length where the converter writes one, as for
// Qwen3-MoE, else feed_forward_length, as for Mixtral and OLMoE), when the file has
// experts; `norm`: renormalise the chosen experts' weights.
void configure_experts(const gguf::File& file, ModelConfig& config, bool norm);

// <arch>.attention.sliding_window as a layer's window: 0 (none) when absent, unless
// `required`; an Error naming the key when negative (or 0 and required). A window of 2^31
// tokens or more is longer than any context: no window.
int32_t sliding_window(const gguf::File& file, const std::string& arch, bool required);

}  // namespace ridge
