// The engine's inside, shared by engine.cpp (the loop, admission, streaming) and
// engine_speculative.cpp (drafting and verification). Not part of the public API.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/draft_length.h"
#include "engine/draft_model.h"
#include "engine/engine.h"
#include "engine/request_output.h"
#include "engine/scheduler.h"
#include "grammar/matcher.h"
#include "kv/kv_cache.h"

namespace ridge {

using EngineClock = std::chrono::steady_clock;

// One request as the engine thread sees it. The scheduler works on the SequenceState base.
struct Request : SequenceState {
  uint64_t id = 0;           // unique per engine: the draft model's slot owner
  std::shared_ptr<RequestStream> stream;
  int32_t max_tokens = 0;    // generated tokens at most (validated, context-capped)
  bool want_logprobs = false;
  Sampler sampler;
  std::unique_ptr<grammar::GrammarMatcher> grammar;  // constrained decoding, else null
  RequestOutput output;
  int32_t n_generated = 0;
  EngineClock::time_point submitted;
  EngineClock::time_point last_token;
  bool finished = false;

  // Scoring (RequestParams::score): no sampling; scored positions are [score_from, n_prompt - 2].
  std::function<void(int32_t, std::span<const float>)> score;
  int32_t score_from = 0;
  std::string score_error;  // what score threw, reported when the step ends
  int32_t scored_until = -1;  // last position delivered (a preempted request is recomputed,
                              // and its positions are not delivered twice)

  // Embedding (RequestParams::hidden): every prompt position's final hidden state.
  std::function<void(int32_t, std::span<const float>)> hidden;
  std::string hidden_error;    // what hidden threw, reported when the step ends
  int32_t hidden_until = -1;   // last position delivered, as scored_until

  // Scoring or embedding: the prompt is all there is, nothing is sampled or drafted.
  bool prompt_only() const { return score || hidden; }

  // This step's new tokens' logprobs (the tokens are the last ones of `tokens`).
  std::vector<float> step_logprobs;
  std::vector<std::vector<TokenLogprob>> step_top_logprobs;

  // Speculative decoding.
  Sampler draft_sampler;           // draws a draft model's tokens (its own stream)
  std::vector<int32_t> drafts;     // [<= draft_max] proposed this step
  AcceptanceEstimate acceptance;
  int32_t steps_without_drafts = 0;
  int32_t draft_slot = -1;         // the draft model's slot this request last drafted in
  int32_t spec_steps = 0, spec_drafted = 0, spec_accepted = 0, spec_rejected = 0;

  Request(RequestParams& p, std::shared_ptr<RequestStream> s, int32_t max_tokens_, const Tokenizer& tokenizer,
          uint64_t id_, int32_t draft_max);
};

struct Engine::Impl {
  Model& model;
  const Tokenizer& tokenizer;
  EngineOptions options;
  EngineLimits limits;
  int32_t n_vocab = 0;
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<DraftModel> draft;  // SpecMethod::kDraftModel
  // The vocabulary's trie for grammar masks: built by the first constrained request.
  std::once_flag token_trie_once;
  std::shared_ptr<const grammar::TokenTrie> token_trie;

  // Shared with submitting threads, under mutex.
  std::mutex mutex;
  std::condition_variable wake;
  std::vector<std::unique_ptr<Request>> incoming;
  int32_t scheduler_waiting = 0;  // published by the engine thread for the queue limit
  std::atomic<uint64_t> next_id{1};
  bool stopping = false;
  bool stopped = false;
  std::thread thread;
  std::mutex stop_mutex;  // serializes stop()

  // Engine thread only.
  std::vector<std::unique_ptr<Request>> live;  // in the scheduler (waiting or running)
  Batch batch;
  std::vector<float> logits;  // [logit rows of a step][n_vocab]
  EngineMetrics counters;

  // Scoring requests' logits arrive in slices through the model's LogitSink.
  static constexpr int32_t kScoreSliceRows = 32;
  std::vector<float> score_logits;  // [kScoreSliceRows][n_vocab], sized at the first scoring request
  struct RowTarget {                // what one logit row of the step is for
    Request* request;
    int32_t position;               // scored prompt position, or -1: a sampling row
    int32_t sampling_row;           // its row in `logits` (sampling rows only)
  };
  std::vector<RowTarget> row_targets;
  std::vector<RowTarget> hidden_targets;  // what each of the step's hidden rows is for
  std::vector<grammar::GrammarMatcher*> mask_jobs;  // masks computed during the step's forward

  // Speculative decoding, engine thread only.
  StepCostModel step_costs;         // measured target step seconds by tokens
  double draft_token_cost = 0.0;    // a draft token over a target step, by bytes read
  std::vector<float> target_probs;  // [draft_max + 1][n_vocab] one request's verification
  std::vector<float> draft_probs;   // [parallel][draft_max][n_vocab] draft model's q rows
  std::vector<DraftJob> draft_jobs;   // this step's drafting (verify finds q rows here)
  std::vector<DraftJob> follow_jobs;  // this step's prefill chunks for the draft model
  std::vector<int32_t> grammar_states;  // [draft_max + 1] a constrained verification's states

  // Published after every iteration, for metrics().
  mutable std::mutex metrics_mutex;
  EngineMetrics snapshot;

  Impl(Model& m, const Tokenizer& t, const EngineOptions& o, Model* draft_model);
  void run();
  void step();
  void deliver_rows(int32_t first, int32_t n, const float* rows);  // a LogitSink slice
  void deliver_hidden(int32_t n, const float* rows);  // the step's hidden rows ([n][n_embd])
  // Streams the request's last n_new tokens (this step's) as one event.
  void emit(Request& r, int32_t n_new);
  void end(Request& r, FinishReason reason, const std::string& error);
  void drop_cancelled();
  void remove_finished();
  void publish_metrics();
  void cancel_everything();
  std::unique_ptr<Request> make_request(RequestParams& params);  // validates: EngineError
  void queue(std::vector<std::unique_ptr<Request>>& requests);  // all or none

  // engine_speculative.cpp
  void setup_speculation(Model* draft_model);
  void propose_drafts();       // before schedule(): drafts for running decodes
  int32_t draft_length(Request& r, int32_t cap) const;
  void follow_prefills(const SchedulerStep& plan);  // the draft model reads prompt chunks too
  // After the forward pass: r's chunk ended in n_draft drafts; rows: its 1 + n_draft rows.
  void verify(Request& r, float* rows, int32_t n_draft);
  // Sets the logits of ids the tokenizer lacks (embedding padding) to -inf in n_rows rows.
  void hide_untokenizable(float* rows, int32_t n_rows) const;
  // Constrained decoding: masks row for state (false, after ending r with an error, when the
  // grammar allows no token), and advances r's matcher by a chosen token.
  bool constrain(Request& r, int32_t state, std::span<float> row);
  bool advance_grammar(Request& r, int32_t token);
  void release_draft(Request& r);  // the request no longer holds its draft slot
};

}  // namespace ridge
