// The serving engine: one thread owns the model and the KV cache and, every step, builds
// one Batch from all running requests (decode tokens first, then chunked prefill of
// waiting requests within a token budget), runs it, samples, and streams tokens back.
// HTTP threads submit requests and read their streams; cancelling (a disconnect) frees
// the request's blocks at the next step.
//
//   Engine engine(*model, tokenizer, {.parallel = 8, .max_batch_tokens = 256});
//   engine.start();
//   RequestParams p;  p.prompt = tokenizer.encode("Hello");  p.max_tokens = 32;
//   std::shared_ptr<RequestStream> s = engine.submit(std::move(p));   // throws EngineError
//   for (StreamEvent ev; s->next(ev);) std::cout << ev.text;           // until finished
//   engine.stop();
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "engine/ngram.h"
#include "engine/request_output.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ridge {

enum class SpecMethod { kNone, kNgram, kDraftModel };
const char* spec_method_name(SpecMethod m);  // "none", "ngram", "draft"

// Speculative decoding: each decoding request may carry drafted tokens that the target
// verifies in the same step as everything else (see engine_speculative.cpp). Greedy
// output is exactly the output without it; sampled output has exactly the target's
// distribution (verify_draft).
struct SpeculativeOptions {
  SpecMethod method = SpecMethod::kNone;
  int32_t draft_max = 8;     // most tokens drafted per request and step
  bool adaptive = true;      // per request, the length that pays most from the measured
                             // acceptance and costs (engine/draft_length.h), 0 where none
                             // pays; false: always draft_max
  NgramOptions ngram = {};   // kNgram: suffix lengths searched
};

struct EngineOptions {
  int32_t parallel = 4;            // most sequences running at once (KV sequence slots)
  int32_t max_batch_tokens = 256;  // token budget of one step (decode + prefill chunks)
  size_t kv_budget_bytes = 0;      // 0: enough for `parallel` full contexts, capped at 1 GiB
  int32_t n_ctx = 0;               // per-sequence context; 0: model's, capped at 8192
  int32_t max_queue = 64;          // waiting requests beyond this are refused (QueueFull)
  bool prefix_cache = true;        // reuse full KV blocks of identical prompt prefixes
                                   // (sliding-window models too; see kv/kv_cache.h)
  int32_t state_checkpoints = -1;  // hybrids with prefix_cache: recurrent states kept at block
                                   // boundaries for reuse (kv/kv_cache.h); -1: parallel + 1
                                   // (each running conversation and a shared system prompt),
                                   // 0: no prefix reuse on a hybrid
  DType kv_type = DType::F16;      // K/V element type, one of kKvDtypes (f16 as llama.cpp;
                                   // the draft model's cache too)
  SpeculativeOptions speculative = {};
};

// How a run is sized: the one place that turns options into a context length, a step
// budget and a KV cache, for every client (run, bench, serve). The engine builds its cache
// from it; clients read the resulting limits back from Engine::limits().
struct EngineSizing {
  int32_t n_ctx = 0;            // per-request context: options.n_ctx, or the model's capped at 8192
  int32_t max_step_tokens = 0;  // tokens one step computes: options.max_batch_tokens, at most
                                // one context
  KvCacheConfig kv;             // layers, slots, options.kv_type, budget: options.kv_budget_bytes,
                                // or `parallel` contexts plus one partly filled block each (at
                                // the type's bytes per token), capped at 1 GiB
  size_t kv_bytes_all_contexts = 0;  // that default before its cap: what holds every
                                     // sequence's whole context
};
// Throws ridge::Error naming the option when the options cannot run on this model.
EngineSizing size_engine(const Model& model, const EngineOptions& options);

// What one request may use, once the engine is built.
struct EngineLimits {
  int32_t n_ctx = 0;               // the context the options asked for
  int32_t max_request_tokens = 0;  // prompt + completion at most: n_ctx, or less when the KV
                                   // cache cannot hold that much for one request
  int32_t max_step_tokens = 0;
  int32_t parallel = 0;
  int32_t max_queue = 0;           // requests one submit() can queue at most (when none wait)
};

struct RequestParams {
  std::vector<int32_t> prompt;     // tokens, already templated and tokenized
  int32_t max_tokens = 16;         // generated tokens at most; 0: as many as the context allows
  SamplingParams sampling;
  std::vector<std::string> stop;   // stop strings: generation ends before the first match
  bool ignore_eos = false;
  // Constrained decoding: when set, every sampled token keeps the generated text a prefix of
  // a sentence of this grammar (the logits of other tokens are -inf before the sampler's
  // chain; end-of-generation only once the text is complete). Drafted tokens are checked
  // too. A grammar that leaves no token to choose ends the request with kError.
  std::shared_ptr<const grammar::Grammar> grammar;

  // Scoring instead of generating (ridge perplexity): when set, nothing is sampled; for
  // every prompt position p in [score_from, prompt.size() - 2], score(p, logits) gets the
  // logits ([n_vocab]) that predict prompt token p + 1, on the engine thread, in position
  // order. The request ends with FinishReason::kLength and no completion tokens once its
  // prompt is computed (kError with the message if score throws); max_tokens, sampling
  // and stop are not used.
  std::function<void(int32_t position, std::span<const float> logits)> score;
  int32_t score_from = 0;

  // Embedding instead of generating (/v1/embeddings; engine/embedding.h pools): when set,
  // nothing is sampled; for every prompt position p in [0, prompt.size() - 1], hidden(p,
  // state) gets the final hidden state ([n_embd], after the output norm, before the output
  // projection), on the engine thread, each position once. The prompt is computed whole:
  // no prefix cache, since every position's state is needed. The request ends with
  // FinishReason::kLength once its prompt is computed (kError with the message if hidden
  // throws); max_tokens, sampling and stop are not used. Not together with score.
  std::function<void(int32_t position, std::span<const float> hidden)> hidden;
};

// One step of a request's stream. Text arrives in whole UTF-8 characters; text that
// could be the start of a stop string is held back until it is known not to be.
struct StreamEvent {
  std::string text;                       // new text (may be empty on the final event)
  std::vector<int32_t> tokens;            // tokens this event covers
  std::vector<float> logprobs;            // per token, when sampling.logprobs
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // per token, when n_logprobs > 0
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;                      // when finish_reason == kError
  // When the engine pushed the event: a reader that drains several streams in turn (the
  // Python package's generate) still times each request's first token and end.
  std::chrono::steady_clock::time_point time;
  // Totals so far (final values on the finished event).
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;       // prompt tokens served from the prefix cache
  // Speculative decoding so far: steps that verified drafts, tokens drafted, accepted, and
  // steps that rejected a drafted token (accepted / (accepted + rejected) estimates the
  // per-token acceptance rate alpha: each draft is trials up to the first rejection).
  int32_t spec_steps = 0;
  int32_t spec_drafted = 0;
  int32_t spec_accepted = 0;
  int32_t spec_rejected = 0;
};

// Thrown by submit() for a request that cannot be served; `status` is the HTTP status
// the server should answer with (400 invalid, 429 queue full, 503 stopping).
// `param` names the request field at fault and `code` a machine-readable reason, as in
// OpenAI's errors ("" when none): a prompt over the limit is ("prompt",
// "context_length_exceeded").
class EngineError : public Error {
 public:
  EngineError(int status, const std::string& message, std::string param = "", std::string code = "")
      : Error(message), status(status), param(std::move(param)), code(std::move(code)) {}
  int status;
  std::string param;
  std::string code;
};

// The consumer side of one request. Thread-safe; the engine pushes, one reader pops.
class RequestStream {
 public:
  // Blocks until an event is available; returns false after the finished event was read.
  bool next(StreamEvent& event);
  // Like next() but gives up after timeout (returns false and leaves event untouched,
  // with timed_out set) — lets a server poll for client disconnects.
  bool next_for(StreamEvent& event, std::chrono::milliseconds timeout, bool& timed_out);
  // Asks the engine to stop this request; its blocks are freed at the next step and a
  // final event with FinishReason::kCancelled follows.
  void cancel();
  bool cancelled() const;

 private:
  friend class Engine;
  void push(StreamEvent event);
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<StreamEvent> events_;
  bool finished_read_ = false;
  bool cancel_requested_ = false;
};

// A snapshot for /metrics.
struct EngineMetrics {
  int32_t requests_running = 0;
  int32_t requests_waiting = 0;
  int32_t kv_blocks_total = 0;        // all groups
  int32_t kv_blocks_used = 0;
  int32_t kv_blocks_cached = 0;       // free but holding reusable prefix blocks
  int32_t draft_kv_blocks_used = 0;   // the draft model's cache (SpecMethod::kDraftModel)
  uint64_t prefix_cache_queries = 0;  // prompt blocks looked up
  uint64_t prefix_cache_hits = 0;     // prompt blocks found
  uint64_t prefix_state_checkpoints = 0;  // recurrent states checkpointed for prefix reuse (hybrids)
  uint64_t prompt_tokens_total = 0;
  uint64_t generation_tokens_total = 0;
  uint64_t requests_finished_total = 0;
  uint64_t preemptions_total = 0;
  // Speculative decoding, for the one proposer the engine runs (spec_method).
  SpecMethod spec_method = SpecMethod::kNone;
  uint64_t spec_drafts_total = 0;           // verifications of a non-empty draft
  uint64_t spec_draft_tokens_total = 0;     // tokens drafted (and verified)
  uint64_t spec_accepted_tokens_total = 0;  // of those, accepted
  // Histograms: bucket upper bounds in seconds and cumulative counts, Prometheus-style.
  std::vector<double> latency_buckets;
  std::vector<uint64_t> ttft_counts;     // time to first token
  double ttft_sum = 0;
  uint64_t ttft_count = 0;
  std::vector<uint64_t> itl_counts;      // inter-token latency
  double itl_sum = 0;
  uint64_t itl_count = 0;
};

class Engine {
 public:
  // draft: the draft model for SpecMethod::kDraftModel (sharing the target's thread pool
  // is best: ModelOptions::pool); it must outlive the engine. Throws ridge::Error for
  // options it cannot serve, and for a draft whose vocabulary differs from the target's.
  Engine(Model& model, const Tokenizer& tokenizer, const EngineOptions& options, Model* draft = nullptr);
  ~Engine();  // stops the loop; unfinished requests end with kCancelled

  void start();
  void stop();

  // Validates (empty prompt, prompt + max_tokens beyond limits().max_request_tokens -> 400,
  // bad sampling params -> 400, queue full -> 429) and queues the request.
  std::shared_ptr<RequestStream> submit(RequestParams params);
  // All or none: validates every request, then queues them together, so they start in the
  // same step (n choices of one API request; bench's batched decode).
  std::vector<std::shared_ptr<RequestStream>> submit(std::vector<RequestParams> params);

  EngineMetrics metrics() const;
  const EngineLimits& limits() const;
  std::string kv_summary() const;  // the KV cache's layout and size, one line (KvCache::summary)
  // A warning line when the context is longer than the model was trained on (its
  // context_length), as llama.cpp gives; "" otherwise.
  std::string context_warning() const;
  // Tokens of context the cache's budget holds in its type and in every other cache type
  // this model can use (KvPlan::tokens_held), one line, e.g.
  // "kv budget: 96 MiB holds 16384 tokens as f16 (the same budget as f32 8192, ...)".
  std::string kv_budget_by_type() const;
  const Tokenizer& tokenizer() const;
  const Model& model() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ridge
