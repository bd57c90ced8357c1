// The engine loop (see engine.h): submit() validates on the caller's thread and queues; one
// engine thread drains the queue into the Scheduler, runs one forward pass per step over
// every scheduled chunk, samples for each sequence that caught up, and streams events.
#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdio>
#include <exception>
#include <future>
#include <limits>

#include "engine/engine_impl.h"

namespace ridge {
namespace {

using Clock = EngineClock;

constexpr size_t kDefaultBudgetCap = size_t{1} << 30;
constexpr int32_t kDefaultContextCap = 8192;

// Prometheus-style upper bounds in seconds, shared by the TTFT and inter-token histograms.
const std::vector<double> kLatencyBuckets = {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5,
                                             0.75,  1.0,  2.5,   5.0,  7.5,   10.0, 30.0, 60.0};

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void observe(std::vector<uint64_t>& counts, double& sum, uint64_t& count, double seconds) {
  for (size_t i = 0; i < kLatencyBuckets.size(); ++i) {
    if (seconds <= kLatencyBuckets[i]) ++counts[i];  // cumulative: every bucket above too
  }
  sum += seconds;
  ++count;
}

}  // namespace

// ---------------------------------------------------------------- Engine::Impl

const char* spec_method_name(SpecMethod m) {
  switch (m) {
    case SpecMethod::kNone: return "none";
    case SpecMethod::kNgram: return "ngram";
    case SpecMethod::kDraftModel: return "draft";
  }
  return "unknown";
}

Request::Request(RequestParams& p, std::shared_ptr<RequestStream> s, int32_t max_tokens_, const Tokenizer& tokenizer,
                 uint64_t id_, int32_t draft_max)
    : id(id_),
      stream(std::move(s)),
      max_tokens(max_tokens_),
      want_logprobs(p.sampling.logprobs || p.sampling.n_logprobs > 0),
      sampler(p.sampling),
      output(tokenizer, std::move(p.stop), p.ignore_eos, max_tokens_),
      submitted(Clock::now()),
      score(std::move(p.score)),
      score_from(p.score_from),
      hidden(std::move(p.hidden)),
      draft_sampler([&] {
        SamplingParams d = p.sampling;  // the request's chain, its own stream, no logprobs
        d.seed = p.sampling.seed ^ 0x9e3779b97f4a7c15ULL;
        d.logprobs = false;
        d.n_logprobs = 0;
        return d;
      }()) {
  n_prompt = static_cast<int32_t>(p.prompt.size());
  tokens = std::move(p.prompt);
  // An embedding needs every position's state and a scoring request every scored
  // position's logits: cached blocks would skip them.
  reuse_prefix = !hidden && !score;
  // Room for every token it may hold, drafts included: no reallocation while running.
  tokens.reserve(static_cast<size_t>(n_prompt + max_tokens + draft_max));
  drafts.reserve(static_cast<size_t>(draft_max));
  step_logprobs.reserve(static_cast<size_t>(draft_max + 1));
  step_top_logprobs.reserve(static_cast<size_t>(draft_max + 1));
}

EngineSizing size_engine(const Model& model, const EngineOptions& o) {
  const ModelConfig& c = model.config();
  if (o.parallel < 1) throw Error(str_cat("engine: parallel must be at least 1, got ", o.parallel));
  if (o.state_checkpoints < -1)
    throw Error(str_cat("engine: state_checkpoints must be -1 (auto) or >= 0, got ", o.state_checkpoints));
  if (o.max_batch_tokens < o.parallel) {
    throw Error(str_cat("engine: max_batch_tokens ", o.max_batch_tokens,
                        " must be at least parallel ", o.parallel, " (one decode token each)"));
  }
  if (o.max_batch_tokens > model.max_batch_tokens()) {
    throw Error(str_cat("engine: max_batch_tokens ", o.max_batch_tokens,
                        " exceeds the model's max_batch_tokens ", model.max_batch_tokens(),
                        " (raise ModelOptions::max_batch_tokens)"));
  }
  if (o.max_queue < 0) throw Error(str_cat("engine: max_queue must be >= 0, got ", o.max_queue));
  if (!is_kv_dtype(o.kv_type))
    throw Error(str_cat("engine: KV cache type ", dtype_name(o.kv_type), " is not supported (", kv_dtype_names(),
                        ")"));
  EngineSizing s;
  s.n_ctx = o.n_ctx > 0 ? o.n_ctx : std::min(c.n_ctx_train, kDefaultContextCap);
  if (s.n_ctx <= 0) throw Error(str_cat("engine: context size must be positive, got ", s.n_ctx));
  // A step holds a token of every running sequence, and the KV cache takes no step longer
  // than one context: a context shorter than that is a setting no step can satisfy.
  if (s.n_ctx < o.parallel)
    throw Error(str_cat("engine: a context of ", s.n_ctx, " tokens is shorter than the ", o.parallel,
                        " sequences one step runs (--parallel); give a longer context or fewer sequences"));
  // No step computes more than one context's tokens (a short -c with the default batch).
  s.max_step_tokens = std::min(o.max_batch_tokens, std::max(s.n_ctx, o.parallel));
  s.kv = model.kv_cache_config(0, o.parallel, s.n_ctx);
  s.kv.max_step_tokens = s.max_step_tokens;
  // A hybrid model resumes a cached prefix from a checkpoint of its recurrent state.
  s.kv.prefix_cache = o.prefix_cache;
  if (c.is_hybrid() && o.prefix_cache) s.kv.state_checkpoints = o.state_checkpoints >= 0 ? o.state_checkpoints : o.parallel + 1;
  s.kv.dtype = o.kv_type;
  // Speculative decoding on a hybrid: a verify chunk (the decode token and its drafts) keeps
  // the recurrent state after each token, so a rejection rolls back to the last accepted one.
  if (c.is_hybrid() && o.speculative.method != SpecMethod::kNone)
    s.kv.state_snapshots = 1 + std::max(o.speculative.draft_max, 0);
  // Slack: each sequence's last block is partly filled.
  const size_t per_sequence = kv_bytes_per_token(s.kv) * static_cast<size_t>(s.n_ctx + s.kv.block_size);
  s.kv_bytes_all_contexts = per_sequence * static_cast<size_t>(o.parallel);
  // Recurrent state: a fixed size per sequence slot (and checkpoint), whatever the context, on
  // top of the K/V.
  const size_t state_bytes = kv_state_bytes(s.kv);
  s.kv.budget_bytes = o.kv_budget_bytes > 0 ? o.kv_budget_bytes
                                            : std::min(kDefaultBudgetCap, s.kv_bytes_all_contexts) + state_bytes;
  return s;
}

Engine::Impl::Impl(Model& m, const Tokenizer& t, const EngineOptions& o, Model* draft_model)
    : model(m), tokenizer(t), options(o) {
  const ModelConfig& c = model.config();
  const EngineSizing sizing = size_engine(model, o);
  if (tokenizer.n_vocab() > c.n_vocab) {
    throw Error(str_cat("engine: tokenizer has ", tokenizer.n_vocab(),
                        " tokens but the model's embedding has ", c.n_vocab));
  }
  n_vocab = c.n_vocab;
  cache = std::make_unique<KvCache>(sizing.kv);
  limits.n_ctx = sizing.n_ctx;
  limits.max_request_tokens = std::min(sizing.n_ctx, cache->max_tokens_per_sequence());
  limits.max_step_tokens = sizing.max_step_tokens;
  limits.parallel = o.parallel;
  limits.max_queue = o.max_queue;
  scheduler = std::make_unique<Scheduler>(
      SchedulerOptions{o.parallel, sizing.max_step_tokens, o.max_queue}, *cache);
  setup_speculation(draft_model);

  // A step's logit rows: one per running sequence, plus each one's drafts.
  const int32_t draft_max = options.speculative.method == SpecMethod::kNone ? 0 : options.speculative.draft_max;
  const int32_t logit_rows = std::min(sizing.max_step_tokens, o.parallel * (1 + draft_max));
  live.reserve(static_cast<size_t>(o.parallel + o.max_queue));
  batch.tokens.reserve(static_cast<size_t>(sizing.max_step_tokens));
  batch.positions.reserve(static_cast<size_t>(sizing.max_step_tokens));
  batch.logit_rows.reserve(static_cast<size_t>(logit_rows));
  batch.hidden_rows.reserve(static_cast<size_t>(sizing.max_step_tokens));
  hidden_targets.reserve(static_cast<size_t>(sizing.max_step_tokens));
  batch.sequences.reserve(static_cast<size_t>(o.parallel));
  mask_jobs.reserve(static_cast<size_t>(o.parallel));
  logits.resize(static_cast<size_t>(logit_rows) * static_cast<size_t>(n_vocab));

  counters.latency_buckets = kLatencyBuckets;
  counters.ttft_counts.assign(kLatencyBuckets.size(), 0);
  counters.itl_counts.assign(kLatencyBuckets.size(), 0);
  counters.spec_method = options.speculative.method;
  for (int g = 0; g < cache->n_groups(); ++g) counters.kv_blocks_total += cache->group(g).n_blocks;
  snapshot = counters;
}

void Engine::Impl::run() {
  for (;;) {
    {
      std::unique_lock lock(mutex);
      wake.wait(lock, [&] { return stopping || !incoming.empty() || !scheduler->idle(); });
      if (stopping) return;
      for (std::unique_ptr<Request>& r : incoming) {
        if (r->score && score_logits.empty())
          score_logits.resize(static_cast<size_t>(kScoreSliceRows) * static_cast<size_t>(n_vocab));
        scheduler->add(r.get());
        live.push_back(std::move(r));
      }
      incoming.clear();
      scheduler_waiting = scheduler->n_waiting();  // with the drain, so submit never undercounts
      // And the gauges, in the same critical section: metrics() reads the snapshot and
      // the queue together, so a drained request is never missing from both (its first
      // tokens go out before this step's publish_metrics).
      std::lock_guard metrics_lock(metrics_mutex);
      snapshot.requests_running = scheduler->n_running();
      snapshot.requests_waiting = scheduler->n_waiting();
    }
    try {
      drop_cancelled();
      if (!scheduler->idle()) step();
    } catch (const std::exception& e) {
      // Bookkeeping failed mid-step: end every request rather than the server.
      for (std::unique_ptr<Request>& r : live) {
        if (!r->finished) end(*r, FinishReason::kError, str_cat("engine: ", e.what()));
      }
    }
    remove_finished();
    {
      std::lock_guard lock(mutex);
      scheduler_waiting = scheduler->n_waiting();
    }
    publish_metrics();
  }
}

void Engine::Impl::step() {
  if (options.speculative.method != SpecMethod::kNone) propose_drafts();
  const SchedulerStep& plan = scheduler->schedule();
  for (SequenceState* s : plan.preempted) release_draft(static_cast<Request&>(*s));
  for (SequenceState* s : plan.failed) {
    end(static_cast<Request&>(*s), FinishReason::kError, "the request no longer fits in the KV cache");
  }
  if (plan.chunks.empty()) return;

  batch.clear();
  row_targets.clear();
  hidden_targets.clear();
  int32_t sampling_rows = 0;
  bool scoring = false;
  for (const ScheduledChunk& c : plan.chunks) {
    Request& r = static_cast<Request&>(*c.sequence);
    const std::span<const int32_t> chunk_tokens =
        std::span<const int32_t>(r.tokens).subspan(static_cast<size_t>(c.start), static_cast<size_t>(c.n_tokens));
    if (r.score) {  // a row for each scored position in the chunk
      const int32_t from = std::max({r.score_from, c.start, r.scored_until + 1});
      const int32_t to = std::min(r.n_prompt - 2, c.start + c.n_tokens - 1);
      batch.add_sequence(r.slot, c.start, chunk_tokens, from, to);
      for (int32_t p = from; p <= to; ++p) row_targets.push_back({&r, p, -1});
      scoring = scoring || from <= to;
      continue;
    }
    if (r.hidden) {  // embedded: a hidden row for each position not delivered before
      batch.add_sequence(r.slot, c.start, chunk_tokens, LogitRows::kNone);
      const int32_t from = std::max(c.start, r.hidden_until + 1);
      const int32_t end = c.start + c.n_tokens;
      batch.add_hidden_rows(batch.n_tokens() - end + from, std::max(0, end - from));
      for (int32_t p = from; p < end; ++p) hidden_targets.push_back({&r, p, -1});
      continue;
    }
    // The prefix cache hashes confirmed tokens only: a rejected draft is never indexed.
    if (cache->prefix_cache_enabled())
      cache->set_tokens(r.slot, std::span<const int32_t>(r.tokens).first(r.tokens.size() - r.n_draft));
    const LogitRows rows = !c.needs_logits ? LogitRows::kNone : c.n_draft > 0 ? LogitRows::kAll : LogitRows::kLast;
    batch.add_sequence(r.slot, c.start, chunk_tokens, rows, c.n_draft);
    if (c.needs_logits)
      for (int32_t i = 0; i <= c.n_draft; ++i) row_targets.push_back({&r, -1, sampling_rows++});
  }
  // Masks the step's constrained rows will need and have not cached: computed on a helper
  // thread while the forward pass runs (the matchers are not touched by the pass), so a new
  // grammar state does not add its trie walk to the step.
  mask_jobs.clear();
  for (const ScheduledChunk& c : plan.chunks) {
    Request& r = static_cast<Request&>(*c.sequence);
    if (c.needs_logits && r.grammar && !r.grammar->mask_cached(r.grammar->state()))
      mask_jobs.push_back(r.grammar.get());
  }
  std::future<void> masks;
  if (!mask_jobs.empty())
    masks = std::async(std::launch::async, [this] {
      for (grammar::GrammarMatcher* m : mask_jobs) {
        try {
          m->mask(m->state());
        } catch (const std::exception&) {
          // constrain() meets the same error on the engine thread and ends the request
        }
      }
    });
  const Clock::time_point start = Clock::now();
  try {
    LogitSink sink = scoring ? LogitSink{score_logits.data(), kScoreSliceRows,
                                         [this](int32_t first, int32_t n, const float* rows) {
                                           deliver_rows(first, n, rows);
                                         },
                                         nullptr}
                             : LogitSink{logits.data(), std::max(batch.n_logit_rows(), 1), nullptr, nullptr};
    if (batch.n_hidden_rows() > 0)
      sink.on_hidden = [this](int32_t n, const float* rows) { deliver_hidden(n, rows); };
    model.forward(batch, *cache, sink);
    if (masks.valid()) masks.wait();
  } catch (const std::exception& e) {
    if (masks.valid()) masks.wait();
    // forward validates before computing, so the cache is unchanged: fail this batch only.
    for (const ScheduledChunk& c : plan.chunks) {
      end(static_cast<Request&>(*c.sequence), FinishReason::kError, str_cat("forward: ", e.what()));
    }
    return;
  }
  step_costs.observe(batch.n_tokens(), seconds_between(start, Clock::now()));
  if (draft) follow_prefills(plan);
  scheduler->complete_step();

  size_t row = 0;
  for (const ScheduledChunk& c : plan.chunks) {
    Request& r = static_cast<Request&>(*c.sequence);
    if (r.score) {  // scored: ends when its prompt is computed, or at the first error
      if (!r.score_error.empty())
        end(r, FinishReason::kError, str_cat("score: ", r.score_error));
      else if (c.needs_logits) {
        counters.prompt_tokens_total += static_cast<uint64_t>(r.n_prompt);
        end(r, FinishReason::kLength, {});
      }
      continue;
    }
    if (r.hidden) {  // embedded: the same
      if (!r.hidden_error.empty())
        end(r, FinishReason::kError, str_cat("hidden: ", r.hidden_error));
      else if (c.needs_logits) {
        counters.prompt_tokens_total += static_cast<uint64_t>(r.n_prompt);
        end(r, FinishReason::kLength, {});
      }
      continue;
    }
    if (!c.needs_logits) continue;
    float* rows = logits.data() + row * static_cast<size_t>(n_vocab);
    row += static_cast<size_t>(1 + c.n_draft);
    if (r.stream->cancelled()) {
      end(r, FinishReason::kCancelled, {});
      continue;
    }
    hide_untokenizable(rows, 1 + c.n_draft);
    try {  // what goes wrong from here on is this request's alone
      if (c.n_draft > 0) {
        verify(r, rows, c.n_draft);
        continue;
      }
      const std::span<float> row(rows, static_cast<size_t>(n_vocab));
      if (r.grammar && !constrain(r, r.grammar->state(), row)) continue;
      const int32_t token = r.sampler.sample(row, r.tokens);
      if (r.grammar && !advance_grammar(r, token)) continue;
      r.tokens.push_back(token);
      r.step_logprobs.clear();
      r.step_top_logprobs.clear();
      if (r.want_logprobs) {
        r.step_logprobs.push_back(r.sampler.chosen_logprob());
        const std::span<const TokenLogprob> top = r.sampler.top_logprobs();
        r.step_top_logprobs.emplace_back(top.begin(), top.end());
      }
      emit(r, 1);
    } catch (const std::exception& e) {
      if (!r.finished) end(r, FinishReason::kError, str_cat("sampling: ", e.what()));
    }
  }
}

// Embedding rows past the tokenizer's last id (padding, as in Qwen2.5's 151936-row matrix
// over a smaller vocabulary) have no text: they may never be sampled.
void Engine::Impl::hide_untokenizable(float* rows, int32_t n_rows) const {
  const int32_t n_text = tokenizer.n_vocab();
  if (n_text >= n_vocab) return;
  for (int32_t i = 0; i < n_rows; ++i) {
    float* r = rows + static_cast<size_t>(i) * static_cast<size_t>(n_vocab);
    std::fill(r + n_text, r + n_vocab, -std::numeric_limits<float>::infinity());
  }
}

// A grammar that fails here (too ambiguous to match) ends its own request, not the step.
bool Engine::Impl::constrain(Request& r, int32_t state, std::span<float> row) {
  try {
    if (r.grammar->apply_mask(state, row) > 0) return true;
    end(r, FinishReason::kError, "grammar: no token of the vocabulary can continue the output here");
  } catch (const std::exception& e) {
    end(r, FinishReason::kError, e.what());
  }
  return false;
}

bool Engine::Impl::advance_grammar(Request& r, int32_t token) {
  try {
    if (r.grammar->accept(token)) return true;
    end(r, FinishReason::kError, str_cat("grammar: the sampled token ", token, " does not continue the output"));
  } catch (const std::exception& e) {
    end(r, FinishReason::kError, e.what());
  }
  return false;
}

void Engine::Impl::deliver_rows(int32_t first, int32_t n, const float* rows) {
  const auto vocab = static_cast<size_t>(n_vocab);
  for (int32_t i = 0; i < n; ++i) {
    const RowTarget& t = row_targets[static_cast<size_t>(first + i)];
    const float* row = rows + static_cast<size_t>(i) * vocab;
    if (t.position < 0) {
      std::copy_n(row, vocab, logits.data() + static_cast<size_t>(t.sampling_row) * vocab);
      continue;
    }
    if (!t.request->score_error.empty()) continue;
    try {  // the client's code: a throw ends this request, not the step
      t.request->score(t.position, std::span<const float>(row, vocab));
      t.request->scored_until = t.position;
    } catch (const std::exception& e) {
      t.request->score_error = e.what();
    }
  }
}

void Engine::Impl::deliver_hidden(int32_t n, const float* rows) {
  const auto n_embd = static_cast<size_t>(model.config().n_embd);
  for (int32_t i = 0; i < n; ++i) {
    const RowTarget& t = hidden_targets[static_cast<size_t>(i)];
    if (!t.request->hidden_error.empty()) continue;
    try {  // the client's code: a throw ends this request, not the step
      t.request->hidden(t.position, std::span<const float>(rows + static_cast<size_t>(i) * n_embd, n_embd));
      t.request->hidden_until = t.position;
    } catch (const std::exception& e) {
      t.request->hidden_error = e.what();
    }
  }
}

void Engine::Impl::emit(Request& r, int32_t n_new) {
  const Clock::time_point now = Clock::now();
  if (r.n_generated == 0) {
    observe(counters.ttft_counts, counters.ttft_sum, counters.ttft_count, seconds_between(r.submitted, now));
    counters.prompt_tokens_total += static_cast<uint64_t>(r.n_prompt);
  } else {
    observe(counters.itl_counts, counters.itl_sum, counters.itl_count, seconds_between(r.last_token, now));
  }
  r.last_token = now;

  StreamEvent ev;
  FinishReason reason = FinishReason::kNone;
  const size_t first = r.tokens.size() - static_cast<size_t>(n_new);
  for (int32_t i = 0; i < n_new && reason == FinishReason::kNone; ++i) {
    const int32_t token = r.tokens[first + static_cast<size_t>(i)];
    ev.tokens.push_back(token);
    if (r.want_logprobs) {
      ev.logprobs.push_back(r.step_logprobs[static_cast<size_t>(i)]);
      if (r.sampler.params().n_logprobs > 0) ev.top_logprobs.push_back(r.step_top_logprobs[static_cast<size_t>(i)]);
    }
    ++r.n_generated;
    ++counters.generation_tokens_total;
    reason = r.output.push(token, ev.text);
  }
  ev.prompt_tokens = r.n_prompt;
  ev.completion_tokens = r.n_generated;
  ev.cached_prompt_tokens = r.n_cached_prompt;
  ev.spec_steps = r.spec_steps;
  ev.spec_drafted = r.spec_drafted;
  ev.spec_accepted = r.spec_accepted;
  ev.spec_rejected = r.spec_rejected;
  if (reason == FinishReason::kNone) {
    r.stream->push(std::move(ev));
    return;
  }
  ev.finished = true;
  ev.finish_reason = reason;
  r.finished = true;
  scheduler->finish(&r);  // blocks back at once
  release_draft(r);
  ++counters.requests_finished_total;
  r.stream->push(std::move(ev));
}

void Engine::Impl::end(Request& r, FinishReason reason, const std::string& error) {
  if (r.finished) return;
  r.finished = true;
  scheduler->finish(&r);
  release_draft(r);
  ++counters.requests_finished_total;
  StreamEvent ev;
  ev.finished = true;
  ev.finish_reason = reason;
  ev.error = error;
  ev.prompt_tokens = r.n_prompt;
  ev.completion_tokens = r.n_generated;
  ev.cached_prompt_tokens = r.n_cached_prompt;
  ev.spec_steps = r.spec_steps;
  ev.spec_drafted = r.spec_drafted;
  ev.spec_accepted = r.spec_accepted;
  ev.spec_rejected = r.spec_rejected;
  r.stream->push(std::move(ev));
}

void Engine::Impl::drop_cancelled() {
  for (std::unique_ptr<Request>& r : live) {
    if (!r->finished && r->stream->cancelled()) end(*r, FinishReason::kCancelled, {});
  }
}

void Engine::Impl::remove_finished() {
  std::erase_if(live, [](const std::unique_ptr<Request>& r) { return r->finished; });
}

void Engine::Impl::publish_metrics() {
  counters.requests_running = scheduler->n_running();
  counters.requests_waiting = scheduler->n_waiting();
  counters.kv_blocks_used = 0;
  counters.kv_blocks_cached = 0;
  for (int g = 0; g < cache->n_groups(); ++g) {
    counters.kv_blocks_used += cache->n_used_blocks(g);
    counters.kv_blocks_cached += cache->n_cached_blocks(g);
  }
  counters.draft_kv_blocks_used = draft ? draft->n_used_blocks() : 0;
  const SchedulerStats& s = scheduler->stats();
  counters.prefix_cache_queries = s.prefix_queries;
  counters.prefix_cache_hits = s.prefix_hits;
  counters.prefix_state_checkpoints = s.state_checkpoints;
  counters.preemptions_total = s.preemptions;
  std::lock_guard lock(metrics_mutex);
  snapshot = counters;  // same-size vectors: copies without allocating
}

void Engine::Impl::cancel_everything() {
  for (std::unique_ptr<Request>& r : live) {
    if (!r->finished) end(*r, FinishReason::kCancelled, {});
  }
  live.clear();
  std::vector<std::unique_ptr<Request>> queued;
  {
    std::lock_guard lock(mutex);
    queued.swap(incoming);
  }
  for (std::unique_ptr<Request>& r : queued) {
    // Never reached the scheduler: finish it by hand.
    r->finished = true;
    ++counters.requests_finished_total;
    StreamEvent ev;
    ev.finished = true;
    ev.finish_reason = FinishReason::kCancelled;
    ev.prompt_tokens = r->n_prompt;
    r->stream->push(std::move(ev));
  }
  publish_metrics();
}

// ---------------------------------------------------------------- Engine

Engine::Engine(Model& model, const Tokenizer& tokenizer, const EngineOptions& options, Model* draft)
    : impl_(std::make_unique<Impl>(model, tokenizer, options, draft)) {}

Engine::~Engine() { stop(); }

void Engine::start() {
  std::lock_guard lock(impl_->mutex);
  if (impl_->stopping) throw Error("engine: start after stop");
  if (impl_->thread.joinable()) return;
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

void Engine::stop() {
  std::lock_guard stop_lock(impl_->stop_mutex);
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->stopped) return;
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->cancel_everything();  // the engine thread is gone: safe from here
  std::lock_guard lock(impl_->mutex);
  impl_->stopped = true;
}

std::unique_ptr<Request> Engine::Impl::make_request(RequestParams& params) {
  const int32_t limit = limits.max_request_tokens;
  const char* limit_name = limit == limits.n_ctx ? "the context of " : "what the KV cache holds for one request, ";
  const auto n_prompt = static_cast<int64_t>(params.prompt.size());
  if (n_prompt == 0) throw EngineError(400, "prompt: empty (at least one token is needed)", "prompt");
  for (size_t i = 0; i < params.prompt.size(); ++i) {
    if (params.prompt[i] < 0 || params.prompt[i] >= n_vocab) {
      throw EngineError(400, str_cat("prompt: token ", i, " is ", params.prompt[i],
                                     ", outside the vocabulary [0, ", n_vocab, ")"), "prompt");
    }
  }
  if (params.hidden) {  // embedding: the prompt is all there is
    if (params.score) throw EngineError(400, "a request either scores or embeds its prompt, not both", "prompt");
    if (n_prompt > limit)
      throw EngineError(400, str_cat("prompt: ", n_prompt, " tokens exceed ", limit_name, limit, " tokens"), "prompt",
                        "context_length_exceeded");
    params.max_tokens = 1;  // never reached: nothing is sampled
    return std::make_unique<Request>(params, std::make_shared<RequestStream>(), 1, tokenizer, next_id.fetch_add(1), 0);
  }
  if (params.score) {  // scoring: the prompt is all there is
    if (n_prompt < 2) throw EngineError(400, "prompt: scoring needs at least two tokens", "prompt");
    if (params.score_from < 0 || params.score_from > n_prompt - 2)
      throw EngineError(400, str_cat("score_from: ", params.score_from, " outside 0..", n_prompt - 2), "score_from");
    if (n_prompt > limit)
      throw EngineError(400, str_cat("prompt: ", n_prompt, " tokens exceed ", limit_name, limit, " tokens"), "prompt",
                        "context_length_exceeded");
    params.max_tokens = 1;  // never reached: nothing is sampled
    return std::make_unique<Request>(params, std::make_shared<RequestStream>(), 1, tokenizer, next_id.fetch_add(1), 0);
  }
  if (params.max_tokens < 0) {
    throw EngineError(400, str_cat("max_tokens: must be >= 0 (0: up to the context), got ",
                                   params.max_tokens), "max_tokens");
  }
  if (n_prompt >= limit) {
    throw EngineError(400, str_cat("prompt: ", n_prompt, " tokens leave no room to generate in ", limit_name,
                                   limit, " tokens"), "prompt", "context_length_exceeded");
  }
  const int64_t max_tokens = params.max_tokens > 0 ? params.max_tokens : limit - n_prompt;
  if (n_prompt + max_tokens > limit) {
    throw EngineError(400, str_cat("prompt of ", n_prompt, " tokens + max_tokens ", max_tokens, " exceeds ",
                                   limit_name, limit, " tokens"), "max_tokens", "context_length_exceeded");
  }
  for (size_t i = 0; i < params.stop.size(); ++i) {
    if (params.stop[i].empty()) throw EngineError(400, str_cat("stop: string ", i, " is empty"), "stop");
  }
  try {
    validate(params.sampling);
  } catch (const Error& err) {
    throw EngineError(400, err.what());
  }
  const int32_t draft_max = options.speculative.method == SpecMethod::kNone ? 0 : options.speculative.draft_max;
  std::shared_ptr<const grammar::Grammar> constraint = std::move(params.grammar);
  auto request = std::make_unique<Request>(params, std::make_shared<RequestStream>(), static_cast<int32_t>(max_tokens),
                                           tokenizer, next_id.fetch_add(1), draft_max);
  if (constraint) {
    std::call_once(token_trie_once, [&] {
      token_trie = std::make_shared<const grammar::TokenTrie>(grammar::TokenTrie::from_tokenizer(tokenizer));
    });
    request->grammar = std::make_unique<grammar::GrammarMatcher>(std::move(constraint), token_trie);
  }
  return request;
}

void Engine::Impl::queue(std::vector<std::unique_ptr<Request>>& requests) {
  {
    std::lock_guard lock(mutex);
    if (stopping) throw EngineError(503, "engine: shutting down");
    const auto n = static_cast<int32_t>(requests.size());
    if (static_cast<int32_t>(incoming.size()) + scheduler_waiting + n > options.max_queue) {
      throw EngineError(429, str_cat("engine: queue full (", options.max_queue,
                                     " requests waiting); retry later"));
    }
    for (std::unique_ptr<Request>& r : requests) incoming.push_back(std::move(r));
  }
  wake.notify_one();
}

std::shared_ptr<RequestStream> Engine::submit(RequestParams params) {
  std::vector<std::unique_ptr<Request>> one;
  one.push_back(impl_->make_request(params));
  std::shared_ptr<RequestStream> stream = one[0]->stream;
  impl_->queue(one);
  return stream;
}

std::vector<std::shared_ptr<RequestStream>> Engine::submit(std::vector<RequestParams> params) {
  std::vector<std::unique_ptr<Request>> requests;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (RequestParams& p : params) {
    requests.push_back(impl_->make_request(p));
    streams.push_back(requests.back()->stream);
  }
  impl_->queue(requests);
  return streams;
}

EngineMetrics Engine::metrics() const {
  // mutex, then metrics_mutex: the engine thread's drain takes them in this order too.
  std::lock_guard lock(impl_->mutex);
  EngineMetrics m;
  {
    std::lock_guard metrics_lock(impl_->metrics_mutex);
    m = impl_->snapshot;
  }
  m.requests_waiting += static_cast<int32_t>(impl_->incoming.size());  // not yet seen by the engine
  return m;
}

const EngineLimits& Engine::limits() const { return impl_->limits; }
std::string Engine::kv_summary() const { return impl_->cache->summary(); }

std::string Engine::context_warning() const {
  const int32_t trained = impl_->model.config().n_ctx_train;
  const int32_t n_ctx = impl_->limits.n_ctx;
  if (n_ctx <= trained) return {};
  return str_cat("warning: the context of ", n_ctx, " tokens is longer than the ", trained,
                 " the model was trained on; its output past ", trained, " tokens may degrade");
}

std::string Engine::kv_budget_by_type() const {
  // The same budget planned in every cache type: what choosing another --kv-type buys.
  EngineSizing sizing = size_engine(impl_->model, impl_->options);
  sizing.kv.budget_bytes = impl_->cache->total_bytes();
  const int32_t block_size = sizing.kv.block_size;
  const int64_t all_contexts =
      int64_t{sizing.kv.max_sequences} * ((sizing.kv.max_context + block_size - 1) / block_size) * block_size;
  auto held = [&](DType type) -> std::string {
    KvCacheConfig config = sizing.kv;
    config.dtype = type;
    for (const KvLayerSpec& l : config.layers)
      if (!kv_dtype_fits(type, l)) return "n/a";
    try {
      const int64_t tokens = plan_kv_cache(config).tokens_held(block_size);
      if (tokens == 0) return "windowed";
      return tokens == all_contexts ? str_cat(tokens, " (every context full)") : str_cat(tokens);
    } catch (const Error&) {
      return "0";  // the sliding-window layers alone need more than the budget
    }
  };
  std::string others;
  for (DType type : kKvDtypes) {
    if (type == impl_->cache->dtype()) continue;
    others += str_cat(others.empty() ? "" : ", ", dtype_name(type), " ", held(type));
  }
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f", static_cast<double>(impl_->cache->total_bytes()) / (1 << 20));
  return str_cat("kv budget: ", mib, " MiB holds ", held(impl_->cache->dtype()),
                 " tokens as ", dtype_name(impl_->cache->dtype()), " (the same budget as ", others, ")");
}
const Tokenizer& Engine::tokenizer() const { return impl_->tokenizer; }
const Model& Engine::model() const { return impl_->model; }

}  // namespace ridge
