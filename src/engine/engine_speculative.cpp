// Speculative decoding in the engine loop. Before each step, every running request that
// is one token behind (a decode) may get drafted tokens: from n-gram lookup over its own
// tokens, or from the draft model in batched passes. The scheduler runs them with the
// request's decode in the same forward pass as everything else; verify() then keeps the
// accepted prefix and the target's next token, and rolls the rest back (scheduler
// settle_drafts: tokens, KV blocks; the draft model re-syncs on its next call).
//
// Exactness. Verification compares against the distribution the request's sampler would
// have drawn from at each position, computed from the target's logits for that row with
// the penalties of the history up to it (drafts included): greedy keeps a draft exactly
// when it is the argmax, so greedy output equals plain decoding token for token (rows of
// a multi-token step are bit-identical to single-token ones); sampling applies
// verify_draft / verify_certain_draft with the request's seeded stream.
//
// Grammars. A constrained request's draft is cut at the first token its grammar refuses
// (a deterministic function of the history and the draft, so exactness holds), and every
// verified row is masked with the grammar state after the drafts before it: the target
// distribution at each position is exactly the one plain constrained decoding samples
// from, so a rejected draft is replaced by a grammar-valid token, and the matcher is set
// to the state after the accepted drafts (rolled back past the rejected ones).
#include <algorithm>

#include "core/error.h"
#include "engine/engine_impl.h"
#include "engine/ngram.h"
#include "engine/speculative.h"

namespace ridge {
namespace {

// Steps without drafts after which a request whose estimate said "do not speculate"
// tries one draft again, so the estimate can follow text that became predictable.
constexpr int32_t kProbeInterval = 16;

bool is_greedy(const Sampler& s) { return s.params().temperature <= 0.0f; }

}  // namespace

void Engine::Impl::setup_speculation(Model* draft_model) {
  const SpeculativeOptions& spec = options.speculative;
  if (spec.method == SpecMethod::kNone) return;
  // A hybrid target keeps state snapshots for its verify chunks (size_engine); a draft
  // model's own cache rolls back differently, and a hybrid one does not yet.
  if (draft_model != nullptr && draft_model->config().is_hybrid())
    throw Error(str_cat("engine: a ", draft_model->config().arch, " draft model is not supported yet (its recurrent ",
                        "layers cannot roll back rejected drafts); use a transformer draft or --spec ngram"));
  if (spec.draft_max < 1 || spec.draft_max > 32)
    throw Error(str_cat("engine: draft_max must be in 1..32, got ", spec.draft_max));
  if (spec.method == SpecMethod::kNgram) {
    if (spec.ngram.min_ngram < 1 || spec.ngram.max_ngram < spec.ngram.min_ngram)
      throw Error(str_cat("engine: n-gram sizes must satisfy 1 <= min <= max, got ", spec.ngram.min_ngram, " and ",
                          spec.ngram.max_ngram));
    draft_token_cost = 0.0;  // lookup reads no weights
  } else {
    if (draft_model == nullptr) throw Error("engine: speculative method 'draft' needs a draft model");
    const Tokenizer draft_tokenizer = Tokenizer::from_gguf(draft_model->file());
    const std::string difference = vocabulary_difference(tokenizer, draft_tokenizer);
    if (!difference.empty())
      throw Error(str_cat("engine: the draft model's vocabulary differs from the target's (", difference,
                          "); a draft must share the target's tokens"));
    if (draft_model->config().n_vocab != n_vocab)
      throw Error(str_cat("engine: the draft model has ", draft_model->config().n_vocab, " output rows, the target ",
                          n_vocab, "; their distributions must have the same size"));
    EngineOptions draft_options = options;
    draft_options.prefix_cache = false;
    const EngineSizing draft_sizing = size_engine(*draft_model, draft_options);
    draft = std::make_unique<DraftModel>(*draft_model, draft_sizing.kv, draft_sizing.max_step_tokens, spec.draft_max);
    // Both passes are bound by the bytes they read (weights, and the KV of a context).
    const auto kv_bytes = [&](const Model& m) {
      KvCacheConfig kv = m.kv_cache_config(0, 1, 1);
      kv.dtype = options.kv_type;
      return static_cast<double>(kv_bytes_per_token(kv));
    };
    const double typical_context = 512;
    draft_token_cost = (draft_model->weight_bytes_per_step() + kv_bytes(*draft_model) * typical_context) /
                       (model.weight_bytes_per_step() + kv_bytes(model) * typical_context);
    draft_probs.resize(static_cast<size_t>(options.parallel) * static_cast<size_t>(spec.draft_max) *
                       static_cast<size_t>(n_vocab));
  }
  target_probs.resize(static_cast<size_t>(spec.draft_max + 1) * static_cast<size_t>(n_vocab));
  draft_jobs.reserve(static_cast<size_t>(options.parallel));
  follow_jobs.reserve(static_cast<size_t>(options.parallel));
  grammar_states.reserve(static_cast<size_t>(spec.draft_max + 1));
}

int32_t Engine::Impl::draft_length(Request& r, int32_t cap) const {
  const SpeculativeOptions& spec = options.speculative;
  if (!spec.adaptive) return cap;
  const DraftCosts costs{draft_token_cost, step_costs.verify_token(scheduler->n_running())};
  int32_t gamma = best_draft_length(r.acceptance.alpha(), costs, cap);
  if (gamma == 0 && ++r.steps_without_drafts >= kProbeInterval) gamma = 1;
  if (gamma > 0) r.steps_without_drafts = 0;
  return gamma;
}

void Engine::Impl::propose_drafts() {
  const SpeculativeOptions& spec = options.speculative;
  draft_jobs.clear();
  for (SequenceState* s : scheduler->running()) {
    Request& r = static_cast<Request&>(*s);
    r.drafts.clear();
    if (r.finished || r.prompt_only() || r.n_draft != 0 || static_cast<int32_t>(r.tokens.size()) - r.n_computed != 1)
      continue;
    // After the step the request holds up to tokens + gamma + 1 tokens and has generated
    // up to n_generated + gamma + 1: both within its limits.
    const int32_t cap = std::min({spec.draft_max, r.max_tokens - r.n_generated - 1,
                                  limits.max_request_tokens - static_cast<int32_t>(r.tokens.size()) - 1});
    if (cap <= 0) continue;
    const int32_t gamma = draft_length(r, cap);
    if (gamma <= 0) continue;
    if (spec.method == SpecMethod::kNgram) {
      ngram_propose(r.tokens, spec.ngram, gamma, r.drafts);
      continue;
    }
    const size_t job = draft_jobs.size();
    float* q = is_greedy(r.sampler) ? nullptr
                                    : draft_probs.data() + job * static_cast<size_t>(spec.draft_max) * n_vocab;
    draft_jobs.push_back(DraftJob{r.slot, r.id, r.tokens, gamma, &r.draft_sampler, q, &r.drafts});
    r.draft_slot = r.slot;
  }
  if (draft && !draft_jobs.empty()) draft->propose(draft_jobs);
  for (SequenceState* s : scheduler->running()) {
    Request& r = static_cast<Request&>(*s);
    if (r.grammar && !r.drafts.empty()) {
      int32_t state = r.grammar->state();
      size_t keep = 0;
      try {
        while (keep < r.drafts.size() &&
               (state = r.grammar->next_state(state, r.drafts[keep])) != grammar::Automaton::kDead)
          ++keep;
      } catch (const std::exception&) {
        keep = 0;  // verification's mask meets the same error and ends the request
      }
      r.drafts.resize(keep);
    }
    if (r.drafts.empty()) continue;
    r.tokens.insert(r.tokens.end(), r.drafts.begin(), r.drafts.end());
    r.n_draft = static_cast<int32_t>(r.drafts.size());
  }
}

void Engine::Impl::follow_prefills(const SchedulerStep& plan) {
  follow_jobs.clear();
  for (const ScheduledChunk& c : plan.chunks) {
    if (c.n_tokens == 1 || c.n_draft > 0) continue;  // decodes catch up when they draft
    Request& r = static_cast<Request&>(*c.sequence);
    if (r.prompt_only()) continue;  // scored or embedded prompts are never drafted for
    DraftJob job;
    job.slot = r.slot;
    job.owner = r.id;
    job.tokens = std::span<const int32_t>(r.tokens).first(static_cast<size_t>(c.start + c.n_tokens));
    follow_jobs.push_back(job);
    r.draft_slot = r.slot;
  }
  if (!follow_jobs.empty()) draft->follow(follow_jobs);
}

void Engine::Impl::verify(Request& r, float* rows, int32_t n_draft) {
  const size_t vocab = static_cast<size_t>(n_vocab);
  const size_t first_draft = r.tokens.size() - static_cast<size_t>(n_draft);
  const std::span<const int32_t> drafted(r.tokens.data() + first_draft, static_cast<size_t>(n_draft));
  // Row i judges the token after history tokens[0, first_draft + i).
  auto row = [&](int32_t i) { return std::span<float>(rows + static_cast<size_t>(i) * vocab, vocab); };
  auto history = [&](int32_t i) {
    return std::span<const int32_t>(r.tokens).first(first_draft + static_cast<size_t>(i));
  };
  r.step_logprobs.clear();
  r.step_top_logprobs.clear();
  auto keep_logprobs = [&] {
    if (!r.want_logprobs) return;
    r.step_logprobs.push_back(r.sampler.chosen_logprob());
    const std::span<const TokenLogprob> top = r.sampler.top_logprobs();
    r.step_top_logprobs.emplace_back(top.begin(), top.end());
  };

  // The grammar state before each row's token (propose_drafts kept only drafts it allows).
  grammar_states.clear();
  if (r.grammar) {
    grammar_states.push_back(r.grammar->state());
    for (int32_t i = 0; i < n_draft; ++i)  // walked by propose_drafts already: no new states
      grammar_states.push_back(r.grammar->next_state(grammar_states.back(), drafted[static_cast<size_t>(i)]));
    for (int32_t i = 0; i <= n_draft; ++i)
      if (!constrain(r, grammar_states[static_cast<size_t>(i)], row(i))) return;  // ended
  }

  int32_t n_accepted = 0;
  int32_t next = 0;
  if (is_greedy(r.sampler)) {
    // Exactly plain greedy decoding's choice at each position, until one differs.
    for (int32_t i = 0; i <= n_draft; ++i) {
      next = r.sampler.sample(row(i), history(i));
      keep_logprobs();
      if (i == n_draft || next != drafted[static_cast<size_t>(i)]) break;
      ++n_accepted;
    }
  } else {
    for (int32_t i = 0; i <= n_draft; ++i)
      r.sampler.distribution(row(i), history(i), std::span<float>(target_probs).subspan(i * vocab, vocab));
    const std::span<const float> p(target_probs.data(), static_cast<size_t>(n_draft + 1) * vocab);
    SpeculativeStep step;
    if (options.speculative.method == SpecMethod::kDraftModel) {
      size_t job = 0;
      while (draft_jobs[job].drafts != &r.drafts) ++job;
      const std::span<const float> q(draft_jobs[job].q, static_cast<size_t>(n_draft) * vocab);
      step = verify_draft<float>(p, q, drafted, r.sampler);
    } else {
      step = verify_certain_draft<float>(p, drafted, r.sampler);
    }
    n_accepted = step.n_accepted;
    next = step.next_token;
    if (r.want_logprobs) {  // of the penalised rows, as plain sampling reports them
      for (int32_t i = 0; i <= n_accepted; ++i) {
        r.sampler.record_logprobs(row(i), i < n_accepted ? drafted[static_cast<size_t>(i)] : next);
        keep_logprobs();
      }
    }
  }

  r.acceptance.observe(n_draft, n_accepted);
  ++r.spec_steps;
  r.spec_drafted += n_draft;
  r.spec_accepted += n_accepted;
  if (n_accepted < n_draft) ++r.spec_rejected;
  ++counters.spec_drafts_total;
  counters.spec_draft_tokens_total += static_cast<uint64_t>(n_draft);
  counters.spec_accepted_tokens_total += static_cast<uint64_t>(n_accepted);
  scheduler->settle_drafts(&r, n_accepted);
  if (r.grammar) {
    r.grammar->set_state(grammar_states[static_cast<size_t>(n_accepted)]);
    if (!advance_grammar(r, next)) return;
  }
  r.tokens.push_back(next);
  emit(r, n_accepted + 1);
}

void Engine::Impl::release_draft(Request& r) {
  if (draft && r.draft_slot >= 0) draft->release(r.draft_slot, r.id);
  r.draft_slot = -1;
}

}  // namespace ridge
