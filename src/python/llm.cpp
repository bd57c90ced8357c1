#include "python/llm.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "kv/kv_cache.h"
#include "model/model_path.h"
#include "quant/window_scoring.h"

namespace ridge::python {
namespace {

using Clock = std::chrono::steady_clock;

// The engine queues this many requests at most; generate() submits longer lists in parts.
constexpr int32_t kMaxQueue = 4096;

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

EngineOptions engine_options(const LlmOptions& o) {
  if (o.max_num_seqs < 1) throw ParameterError(str_cat("max_num_seqs must be >= 1, got ", o.max_num_seqs));
  if (o.max_batch_tokens < 1)
    throw ParameterError(str_cat("max_batch_tokens must be >= 1, got ", o.max_batch_tokens));
  if (o.n_ctx < 0) throw ParameterError(str_cat("n_ctx must be >= 0 (0: the model's), got ", o.n_ctx));
  if (o.threads < 0) throw ParameterError(str_cat("threads must be >= 0 (0: all cores), got ", o.threads));
  if (!(o.kv_budget_mib >= 0)) throw ParameterError(str_cat("kv_budget_mib must be >= 0, got ", o.kv_budget_mib));
  EngineOptions e;
  e.parallel = o.max_num_seqs;
  e.max_batch_tokens = o.max_batch_tokens;
  e.n_ctx = o.n_ctx;
  e.kv_budget_bytes = static_cast<size_t>(o.kv_budget_mib * 1024 * 1024);
  e.max_queue = kMaxQueue;
  e.prefix_cache = o.prefix_cache;
  const std::optional<DType> kv = dtype_from_name(o.kv_type);
  if (!kv || !is_kv_dtype(*kv))
    throw ParameterError(str_cat("kv_type: unknown KV cache type '", o.kv_type, "' (use ", kv_dtype_names(), ")"));
  e.kv_type = *kv;

  const std::string method = o.spec == "none" && !o.draft.empty() ? "draft" : o.spec;
  if (method == "none")
    e.speculative.method = SpecMethod::kNone;
  else if (method == "ngram")
    e.speculative.method = SpecMethod::kNgram;
  else if (method == "draft")
    e.speculative.method = SpecMethod::kDraftModel;
  else
    throw ParameterError(str_cat("spec must be 'none', 'ngram' or 'draft', got '", o.spec, "'"));
  if (e.speculative.method == SpecMethod::kDraftModel && o.draft.empty())
    throw ParameterError("spec='draft' needs a draft model: draft=MODEL");
  if (e.speculative.method != SpecMethod::kDraftModel && !o.draft.empty())
    throw ParameterError(str_cat("draft is a draft model for spec='draft', not for spec='", method, "'"));
  if (o.draft_max < 1 || o.draft_max > 32) throw ParameterError(str_cat("draft_max must be in 1..32, got ", o.draft_max));
  e.speculative.draft_max = o.draft_max;
  return e;
}

std::string resolve(const std::string& model, const char* what) {
  try {
    return resolve_model_path(model);
  } catch (const Error& e) {
    throw ModelNotFound(str_cat(what, ": ", e.what()));
  }
}

// Reads every stream to its finished event, handing each event to on_event (stream by
// stream, in order; the engine keeps running the others meanwhile). Anything that throws,
// check or on_event, cancels every stream and reads them to their ends before the
// exception propagates, so no request is left running on what the caller frees.
void drain(std::span<const std::shared_ptr<RequestStream>> streams,
           const std::function<void(size_t, StreamEvent&)>& on_event, const CheckInterrupt& check) {
  try {
    Clock::time_point checked = Clock::now();
    for (size_t i = 0; i < streams.size(); ++i) {
      StreamEvent ev;
      for (bool timed_out = false;;) {
        // Checked on time whether events keep coming or not.
        if (Clock::now() - checked >= kPollInterval) {
          check();
          checked = Clock::now();
        }
        if (streams[i]->next_for(ev, kPollInterval, timed_out)) {
          on_event(i, ev);
          if (ev.finished) break;
        } else if (!timed_out) {
          break;  // its finished event was read already
        }
      }
    }
  } catch (...) {
    for (const auto& s : streams) s->cancel();
    for (const auto& s : streams)
      for (StreamEvent ev; s->next(ev);) {
      }
    throw;
  }
}

}  // namespace

Llm::Llm(const LlmOptions& options) {
  const EngineOptions eo = engine_options(options);
  WeightFormat weights;
  try {
    weights = parse_weight_format(options.weights);
  } catch (const Error& e) {
    throw ParameterError(str_cat("weights: ", e.what()));
  }
  path_ = resolve(options.model, "model");
  const std::string draft_path = options.draft.empty() ? "" : resolve(options.draft, "draft");
  model_ = Model::load(path_, {.n_threads = options.threads,
                               .max_batch_tokens = options.max_batch_tokens,
                               .weights = weights,
                               .n_ctx = options.n_ctx});
  if (!draft_path.empty())  // on the target's threads, as `ridge run --draft` loads it
    draft_ = Model::load(draft_path, {.max_batch_tokens = options.max_batch_tokens, .pool = &model_->pool()});
  tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(model_->file()));
  try {
    engine_ = std::make_unique<Engine>(*model_, *tokenizer_, eo, draft_.get());
  } catch (const Error& e) {
    // Options this model cannot run with: a cache type its heads do not fit, a context
    // over the KV budget, a draft with another vocabulary.
    throw ParameterError(e.what());
  }
  engine_->start();
}

Llm::~Llm() { close(); }

void Llm::close() {
  std::unique_lock lock(mutex_);
  if (closed_) return;
  closed_ = true;
  engine_.reset();  // stops the loop; unfinished requests end as cancelled
  tokenizer_.reset();
  draft_.reset();
  model_.reset();
}

std::shared_lock<std::shared_mutex> Llm::open_lock() const {
  std::shared_lock lock(mutex_);
  if (closed_) throw Error("this LLM is closed");
  return lock;
}

std::vector<Completion> Llm::generate(std::vector<RequestParams> requests, const CheckInterrupt& check) {
  auto lock = open_lock();
  std::vector<Completion> out(requests.size());
  for (size_t begin = 0; begin < requests.size(); begin += kMaxQueue) {
    const size_t end = std::min(requests.size(), begin + kMaxQueue);
    std::vector<RequestParams> part(std::make_move_iterator(requests.begin() + static_cast<std::ptrdiff_t>(begin)),
                                    std::make_move_iterator(requests.begin() + static_cast<std::ptrdiff_t>(end)));
    const Clock::time_point submitted = Clock::now();
    std::vector<std::shared_ptr<RequestStream>> streams;
    try {
      streams = engine_->submit(std::move(part));
    } catch (const EngineError& e) {
      if (e.status == 400) throw ParameterError(e.what());
      throw;
    }
    drain(streams, [&](size_t i, StreamEvent& ev) {
      Completion& c = out[begin + i];
      if (c.tokens.empty() && !ev.tokens.empty()) c.first_token_seconds = seconds_between(submitted, ev.time);
      c.text += ev.text;
      c.tokens.insert(c.tokens.end(), ev.tokens.begin(), ev.tokens.end());
      c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
      for (auto& top : ev.top_logprobs) c.top_logprobs.push_back(std::move(top));
      if (!ev.finished) return;
      if (ev.finish_reason == FinishReason::kError)
        throw Error(str_cat("prompt ", begin + i, ": generation failed: ", ev.error));
      c.finish_reason = ev.finish_reason;
      c.prompt_tokens = ev.prompt_tokens;
      c.cached_prompt_tokens = ev.cached_prompt_tokens;
      c.total_seconds = seconds_between(submitted, ev.time);
      c.spec_drafted = ev.spec_drafted;
      c.spec_accepted = ev.spec_accepted;
    }, check);
  }
  return out;
}

std::shared_ptr<RequestStream> Llm::submit(RequestParams request) {
  auto lock = open_lock();
  try {
    return engine_->submit(std::move(request));
  } catch (const EngineError& e) {
    if (e.status == 400) throw ParameterError(e.what());
    throw;
  }
}

std::vector<int32_t> Llm::chat_prompt(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  auto lock = open_lock();
  const ChatTemplate tmpl = detect_chat_template(model_->file());
  ChatPrompt rendered;
  try {
    rendered = render_chat_prompt(tmpl, messages, add_generation_prompt);
  } catch (const Error& e) {
    throw ParameterError(str_cat("messages: ", e.what()));
  }
  return tokenizer_->encode_with_markup(rendered.text, rendered.markup, /*add_special=*/true);
}

PerplexityResult Llm::perplexity(std::string_view text, int32_t n_ctx, int32_t chunks, const CheckInterrupt& check) {
  auto lock = open_lock();
  if (n_ctx < 4) throw ParameterError(str_cat("n_ctx must be >= 4, got ", n_ctx));
  if (chunks == 0 || chunks < -1) throw ParameterError(str_cat("chunks must be >= 1, or -1 for all; got ", chunks));
  if (n_ctx > engine_->limits().max_request_tokens)
    throw ParameterError(str_cat("n_ctx ", n_ctx, " is over this LLM's context of ", engine_->limits().max_request_tokens,
                                 " tokens; make the LLM with a larger n_ctx"));
  const std::vector<int32_t> tokens = quant::perplexity_tokens(*tokenizer_, text);
  quant::PerplexityWindows windows;
  try {
    windows = quant::plan_windows(tokens.size(), n_ctx, chunks);
  } catch (const Error& e) {
    throw ParameterError(str_cat("text: ", e.what()));
  }
  if (windows.n_chunk > kMaxQueue)
    throw ParameterError(str_cat("text: ", windows.n_chunk, " windows, over the ", kMaxQueue,
                                 " one call can queue; pass chunks=", kMaxQueue, " or less"));
  quant::WindowScoring scoring(tokens, windows, *tokenizer_);
  const Clock::time_point start = Clock::now();
  const std::vector<std::shared_ptr<RequestStream>> streams = engine_->submit(scoring.requests());
  quant::NllStats total;
  drain(streams, [&](size_t i, StreamEvent& ev) {
    if (!ev.finished) return;
    if (ev.finish_reason == FinishReason::kError) throw Error(str_cat("window ", i + 1, ": ", ev.error));
    total.add(scoring.window_nll(static_cast<int32_t>(i)));
  }, check);
  return {.perplexity = total.perplexity(),
          .error = total.perplexity_error(),
          .n_windows = windows.n_chunk,
          .n_ctx = windows.n_ctx,
          .n_scored = total.count,
          .seconds = seconds_between(start, Clock::now())};
}

std::vector<int32_t> Llm::encode(std::string_view text, bool add_special, bool parse_special) const {
  auto lock = open_lock();
  return tokenizer_->encode(text, add_special, parse_special);
}

std::string Llm::decode(std::span<const int32_t> ids, bool render_special) const {
  auto lock = open_lock();
  try {
    return tokenizer_->decode(ids, {.render_special = render_special});
  } catch (const Error& e) {
    throw ParameterError(e.what());  // an id outside the vocabulary
  }
}

int32_t Llm::n_vocab() const {
  auto lock = open_lock();
  return tokenizer_->n_vocab();
}

EngineLimits Llm::limits() const {
  auto lock = open_lock();
  return engine_->limits();
}

EngineMetrics Llm::metrics() const {
  auto lock = open_lock();
  return engine_->metrics();
}

std::string Llm::description() const {
  auto lock = open_lock();
  return str_cat("model: ", path_, " (", model_->config().summary(), ")\n", engine_->kv_summary(), "; context ",
                 engine_->limits().max_request_tokens, " tokens; ", model_->pool().n_threads(), " threads");
}

bool next_event(RequestStream& stream, StreamEvent& event, const CheckInterrupt& check) {
  for (;;) {
    bool timed_out = false;
    if (stream.next_for(event, kPollInterval, timed_out)) return true;
    if (!timed_out) return false;
    try {
      check();
    } catch (...) {
      stream.cancel();
      throw;
    }
  }
}

}  // namespace ridge::python
