#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace ridge {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Length of the UTF-8 sequence a lead byte starts (1 for invalid leads: pass them through).
size_t utf8_length(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF8) return 4;
  return 1;
}

}  // namespace

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  // Find the start of the last character; keep it back if it is not complete yet.
  size_t cut = pending_.size();
  for (size_t back = 1; back <= std::min<size_t>(4, pending_.size()); ++back) {
    unsigned char c = static_cast<unsigned char>(pending_[pending_.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    if (utf8_length(c) > back) cut = pending_.size() - back;
    break;
  }
  std::string out = pending_.substr(0, cut);
  pending_.erase(0, cut);
  return out;
}

std::string Utf8Stream::flush() { return std::exchange(pending_, {}); }

Generator::Generator(Model& model, const Tokenizer& tokenizer, const GeneratorOptions& options)
    : model_(model), tokenizer_(tokenizer) {
  const ModelConfig& c = model.config();
  if (tokenizer.n_vocab() > c.n_vocab)
    throw Error(str_cat("tokenizer has ", tokenizer.n_vocab(), " tokens but the model's embedding has ", c.n_vocab));
  n_ctx_ = options.n_ctx > 0 ? options.n_ctx : std::min(c.n_ctx_train, 8192);
  if (n_ctx_ <= 0) throw Error(str_cat("context size must be positive, got ", n_ctx_));
  KvCacheConfig kv = model.kv_cache_config(0, 1, n_ctx_);
  // Default budget: room for the whole context (windowed layers need less; the cache
  // sizes them from their window).
  const size_t per_token = kv_bytes_per_token(kv);
  kv.budget_bytes = options.kv_budget_bytes > 0 ? options.kv_budget_bytes
                                                : per_token * (static_cast<size_t>(n_ctx_) + kv.block_size);
  cache_ = std::make_unique<KvCache>(kv);
  cache_->add_sequence(0);
  logits_.resize(c.n_vocab);
  history_.reserve(n_ctx_);
}

void Generator::reset() {
  cache_->free_sequence(0);
  cache_->add_sequence(0);
  history_.clear();
  pending_.clear();
}

void Generator::feed(std::span<const int32_t> tokens, float* logits) {
  const int32_t chunk = model_.max_batch_tokens();
  for (size_t done = 0; done < tokens.size();) {
    const int32_t n = static_cast<int32_t>(std::min<size_t>(chunk, tokens.size() - done));
    if (!cache_->reserve(0, n)) throw Error("KV cache is full (raise --kv-budget)");
    batch_.clear();
    batch_.add_sequence(0, cache_->n_tokens(0), tokens.subspan(done, n),
                        done + n == tokens.size() ? LogitRows::kLast : LogitRows::kNone);
    model_.forward(batch_, *cache_, logits);
    history_.insert(history_.end(), tokens.begin() + done, tokens.begin() + done + n);
    done += n;
  }
}

GenerationStats Generator::generate(std::span<const int32_t> new_tokens, int32_t n_predict,
                                    const SamplingParams& sampling,
                                    const std::function<bool(std::string_view)>& on_text) {
  if (new_tokens.empty()) throw Error("the prompt is empty (no tokens to feed)");
  if (n_predict < 0) throw Error(str_cat("n_predict must be >= 0, got ", n_predict));
  // The last token of the previous call was sampled but not fed: feed it first.
  std::vector<int32_t> to_feed(pending_.begin(), pending_.end());
  to_feed.insert(to_feed.end(), new_tokens.begin(), new_tokens.end());
  const int64_t n_conversation = static_cast<int64_t>(history_.size() + to_feed.size());
  const int64_t needed = n_conversation + n_predict;
  if (needed > n_ctx_)
    throw Error(str_cat("prompt of ", n_conversation, " tokens + n_predict ", n_predict, " exceeds the context of ",
                        n_ctx_, " tokens"));
  const int32_t max_tokens = cache_->max_tokens_per_sequence();
  if (needed > max_tokens)
    throw Error(str_cat("prompt of ", n_conversation, " tokens + n_predict ", n_predict, " needs ", needed,
                        " tokens of KV cache, but its budget holds ", max_tokens));
  for (int32_t id : to_feed)
    if (id < 0 || id >= model_.config().n_vocab) throw Error(str_cat("prompt token id ", id, " is out of range"));
  Sampler sampler(sampling);
  pending_.clear();

  GenerationStats stats;
  Clock::time_point start = Clock::now();
  feed(to_feed, logits_.data());
  stats.n_prompt = static_cast<int32_t>(to_feed.size());
  stats.prompt_seconds = seconds_since(start);

  start = Clock::now();
  Utf8Stream utf8;
  for (int32_t i = 0; i < n_predict; ++i) {
    const int32_t token = sampler.sample(logits_, history_);
    ++stats.n_generated;
    if (tokenizer_.is_end_of_generation(token)) {
      stats.hit_end_of_generation = true;
      pending_.push_back(token);
      break;
    }
    std::string text = utf8.push(tokenizer_.token_to_piece(token));
    const bool go_on = text.empty() || on_text(text);
    if (i + 1 == n_predict || !go_on) {
      pending_.push_back(token);
      break;
    }
    const int32_t one[] = {token};
    feed(one, logits_.data());
  }
  if (std::string rest = utf8.flush(); !rest.empty()) on_text(rest);
  stats.generate_seconds = seconds_since(start);
  return stats;
}

}  // namespace ridge
