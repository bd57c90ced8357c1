// One conversation's generation, for `ridge run`: feeds new tokens (prefill in chunks of
// the model's batch size), then samples and streams tokens until end-of-generation or
// the limit. The KV cache persists across calls, so a chat continues where it left off.
//
//   Generator gen(*model, tokenizer, {.kv_budget_bytes = 256 << 20, .n_ctx = 4096});
//   GenerationStats s = gen.generate(prompt_ids, 64, sampling,
//                                    [](std::string_view text) { fputs(...); return true; });
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampler.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ridge {

struct GeneratorOptions {
  size_t kv_budget_bytes = 0;  // 0: enough for n_ctx tokens
  int32_t n_ctx = 0;           // 0: the model's training context, capped at 8192
};

struct GenerationStats {
  int32_t n_prompt = 0;          // tokens fed this call
  double prompt_seconds = 0;
  int32_t n_generated = 0;       // tokens sampled this call
  double generate_seconds = 0;   // from the first sampled token's step to the last
  bool hit_end_of_generation = false;
};

class Generator {
 public:
  Generator(Model& model, const Tokenizer& tokenizer, const GeneratorOptions& options);

  // Appends new_tokens to the conversation and generates up to n_predict tokens (the end-
  // of-generation token ends it and is not shown). on_text gets the generated text in
  // whole UTF-8 characters as it arrives; returning false stops. Throws ridge::Error,
  // before any compute, if new_tokens is empty or the conversation would not fit the
  // context or the KV cache ("prompt of N tokens + n_predict M exceeds context C").
  GenerationStats generate(std::span<const int32_t> new_tokens, int32_t n_predict, const SamplingParams& sampling,
                           const std::function<bool(std::string_view)>& on_text);

  // Tokens in the KV cache so far, and the last sampled token (or end-of-generation
  // token) that the next generate() call feeds before its new tokens.
  const std::vector<int32_t>& history() const { return history_; }
  const std::vector<int32_t>& pending() const { return pending_; }
  int32_t n_ctx() const { return n_ctx_; }
  const KvCache& cache() const { return *cache_; }
  // Forgets the conversation (frees its KV blocks).
  void reset();

 private:
  void feed(std::span<const int32_t> tokens, float* logits);

  Model& model_;
  const Tokenizer& tokenizer_;
  int32_t n_ctx_ = 0;
  std::unique_ptr<KvCache> cache_;
  std::vector<int32_t> history_;   // fed: exactly the tokens in the cache
  std::vector<int32_t> pending_;   // sampled, not yet fed (at most one)
  std::vector<float> logits_;  // [n_vocab]
  Batch batch_;
};

// Holds back the bytes of an incomplete UTF-8 character at the end of streamed text.
class Utf8Stream {
 public:
  // Appends bytes; returns the longest prefix of the pending text that ends on a
  // character boundary (removing it from the pending text).
  std::string push(std::string_view bytes);
  std::string flush();  // whatever is left, complete or not

 private:
  std::string pending_;
};

}  // namespace ridge
