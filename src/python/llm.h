// The engine as vLLM's offline `LLM` drives it: one model and one continuously batching
// engine; a list of prompts submitted at once and their outputs collected. The C++ half
// of the Python package: module.cpp binds it, python/ridge/ wraps it in vLLM's names.
// No Python here; where a wait must be interruptible (Ctrl-C), the caller passes a check
// that throws to stop.
//
//   Llm llm({.model = "gemma3-270m", .max_num_seqs = 16});
//   RequestParams p;  p.prompt = llm.encode("Hello", true, true);  p.max_tokens = 32;
//   std::vector<Completion> out = llm.generate({p}, [] {});   // out[0].text, .tokens, ...
//   PerplexityResult r = llm.perplexity(text, 512, -1, [] {});
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ridge::python {

// A parameter the caller chose is out of range (Python: ridge.InvalidParameterError, a
// ValueError); the message names the parameter.
class ParameterError : public Error {
 public:
  using Error::Error;
};

// The model argument names no file and no cached model (Python: ridge.ModelNotFoundError,
// a FileNotFoundError).
class ModelNotFound : public Error {
 public:
  using Error::Error;
};

struct LlmOptions {
  std::string model;                  // a GGUF path or a cached model's name (model/model_path.h)
  int threads = 0;                    // 0: all cores
  int32_t n_ctx = 0;                  // per-request context; 0: the model's, capped at 8192
  int32_t max_num_seqs = 16;          // sequences decoded together (EngineOptions::parallel)
  int32_t max_batch_tokens = 512;     // tokens one step computes (decode + prefill chunks)
  double kv_budget_mib = 0;           // 0: max_num_seqs full contexts, capped at 1 GiB
  std::string kv_type = "f16";        // f32, f16, bf16, q8_0, q4_0
  std::string weights = "as-stored";  // or nf4, int8: converted at load (model.h WeightFormat)
  std::string spec = "none";          // speculative decoding: none, ngram, draft
  std::string draft;                  // the draft model (a path or cached name); implies "draft"
  int32_t draft_max = 8;              // most tokens drafted per request and step
  bool prefix_cache = true;           // reuse the KV blocks of identical prompt prefixes
};

// One request's result.
struct Completion {
  std::string text;
  std::vector<int32_t> tokens;                          // generated, the end-of-generation token included
  std::vector<float> logprobs;                          // per token, when sampling.logprobs
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // per token, when sampling.n_logprobs > 0
  FinishReason finish_reason = FinishReason::kNone;
  int32_t prompt_tokens = 0;
  int32_t cached_prompt_tokens = 0;  // served from the prefix cache
  double first_token_seconds = 0;    // submit to the first generated token (0: none)
  double total_seconds = 0;          // submit to the finished event
  int32_t spec_drafted = 0;          // speculative decoding: tokens drafted, and accepted
  int32_t spec_accepted = 0;
};

struct PerplexityResult {
  double perplexity = 0;
  double error = 0;           // its uncertainty, as llama-perplexity prints it
  int32_t n_windows = 0;      // windows of n_ctx tokens
  int32_t n_ctx = 0;
  int64_t n_scored = 0;       // tokens scored (the second half of each window)
  double seconds = 0;
};

// Called about every kPollInterval while a call waits on the engine; throwing stops the
// call: its requests are cancelled and read to their end (so nothing they point into is
// still in use), then the exception propagates.
using CheckInterrupt = std::function<void()>;
inline constexpr std::chrono::milliseconds kPollInterval{50};

class Llm {
 public:
  // Loads the model (and the draft), builds and starts the engine. Throws ModelNotFound,
  // ParameterError naming the option, or ridge::Error from the model's validation.
  explicit Llm(const LlmOptions& options);
  ~Llm();  // close()

  // Runs the requests through the engine together (all are validated before any runs:
  // ParameterError naming the request and field) and returns their results in order.
  std::vector<Completion> generate(std::vector<RequestParams> requests, const CheckInterrupt& check);

  // Queues one request for streaming; read it with next_event().
  std::shared_ptr<RequestStream> submit(RequestParams request);

  // A conversation in the model's chat template, tokenized; only the template's markup
  // may become special tokens. Throws ridge::Error when the model has no chat template,
  // ParameterError for an unknown role.
  std::vector<int32_t> chat_prompt(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  // Perplexity of a text as `ridge perplexity -c n_ctx --chunks chunks` computes it
  // (quant/window_scoring.h), its windows run side by side on this engine.
  PerplexityResult perplexity(std::string_view text, int32_t n_ctx, int32_t chunks, const CheckInterrupt& check);

  // The model's tokenizer (Tokenizer::encode, Tokenizer::decode), under the call lock.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  std::string decode(std::span<const int32_t> ids, bool render_special) const;
  int32_t n_vocab() const;
  EngineLimits limits() const;
  EngineMetrics metrics() const;
  std::string model_path() const { return path_; }
  std::string description() const;  // the model's summary and the KV cache's, one line each

  // Stops the engine and frees the model. Waits for calls in progress (on other threads)
  // to finish; later calls throw ridge::Error. Safe to call twice.
  void close();

 private:
  // Holds the shared lock for a call; throws if closed.
  std::shared_lock<std::shared_mutex> open_lock() const;

  std::string path_;
  mutable std::shared_mutex mutex_;  // shared: calls; exclusive: close()
  bool closed_ = false;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Model> draft_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Engine> engine_;  // last: stopped first
};

// Reads a stream's next event, calling check about every kPollInterval while none has
// come; a throwing check cancels the request before the exception propagates. Returns
// false once the finished event has been read.
bool next_event(RequestStream& stream, StreamEvent& event, const CheckInterrupt& check);

}  // namespace ridge::python
