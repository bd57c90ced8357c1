#include "engine/draft_model.h"

#include <algorithm>

#include "core/error.h"
#include "engine/speculative.h"

namespace ridge {

DraftModel::DraftModel(Model& model, const KvCacheConfig& kv, int32_t max_step_tokens, int32_t max_draft)
    : model_(model), max_step_tokens_(max_step_tokens), max_draft_(max_draft), n_vocab_(model.config().n_vocab) {
  if (max_draft < 1) throw Error(str_cat("draft model: max_draft must be at least 1, got ", max_draft));
  KvCacheConfig config = kv;
  config.prefix_cache = false;
  cache_ = std::make_unique<KvCache>(config);
  const auto n_slots = static_cast<size_t>(cache_->max_sequences());
  slots_.resize(n_slots);
  for (Slot& s : slots_) s.fed.reserve(static_cast<size_t>(cache_->max_context()));
  batch_.tokens.reserve(static_cast<size_t>(max_step_tokens));
  batch_.positions.reserve(static_cast<size_t>(max_step_tokens));
  batch_.sequences.reserve(n_slots);
  batch_.logit_rows.reserve(n_slots);
  logits_.resize(n_slots * static_cast<size_t>(n_vocab_));
  job_rows_.reserve(n_slots);
  job_drafting_.reserve(n_slots);
  scratch_q_.resize(static_cast<size_t>(n_vocab_));
}

int32_t DraftModel::n_used_blocks() const {
  int32_t n = 0;
  for (int g = 0; g < cache_->n_groups(); ++g) n += cache_->n_used_blocks(g);
  return n;
}

void DraftModel::release(int32_t slot, uint64_t owner) {
  if (slot < 0 || slot >= static_cast<int32_t>(slots_.size())) return;
  if (slots_[static_cast<size_t>(slot)].owner == owner) reset(slot);
}

void DraftModel::reset(int32_t slot) {
  Slot& s = slots_.at(static_cast<size_t>(slot));
  if (!s.active) return;
  cache_->free_sequence(slot);
  s.active = false;
  s.fed.clear();
}

int32_t DraftModel::sync(const DraftJob& job, bool keep_last) {
  Slot& s = slots_.at(static_cast<size_t>(job.slot));
  if (!s.active || s.owner != job.owner) {
    reset(job.slot);
    cache_->add_sequence(job.slot);
    s.active = true;
    s.owner = job.owner;
  }
  size_t common = 0;
  const size_t n = std::min(s.fed.size(), job.tokens.size());
  while (common < n && s.fed[common] == job.tokens[common]) ++common;
  if (keep_last && common == job.tokens.size()) --common;  // fed again for its logits
  if (common < s.fed.size()) {
    try {
      cache_->truncate(job.slot, static_cast<int32_t>(common));
    } catch (const Error&) {  // keys a rollback needs were recycled: start over
      cache_->free_sequence(job.slot);
      cache_->add_sequence(job.slot);
      common = 0;
    }
    s.fed.resize(common);
  }
  return static_cast<int32_t>(job.tokens.size() - common);
}

void DraftModel::draw(DraftJob& job, int32_t index, float* logits_row) {
  const std::span<float> logits(logits_row, static_cast<size_t>(n_vocab_));
  const Slot& s = slots_[static_cast<size_t>(job.slot)];
  if (job.sampler->params().temperature <= 0.0f) {
    job.drafts->push_back(job.sampler->sample(logits, s.fed));
    return;
  }
  float* q = job.q != nullptr ? job.q + static_cast<size_t>(index) * n_vocab_ : scratch_q_.data();
  const std::span<float> q_row(q, static_cast<size_t>(n_vocab_));
  job.sampler->distribution(logits, s.fed, q_row);
  job.drafts->push_back(sample_categorical<float>(q_row, job.sampler->uniform()));
}

void DraftModel::follow(std::span<const DraftJob> jobs) {
  batch_.clear();
  int32_t budget = max_step_tokens_;
  for (const DraftJob& job : jobs) {
    if (job.tokens.empty() || static_cast<int64_t>(job.tokens.size()) > cache_->max_context()) continue;
    const int32_t n_feed = sync(job, /*keep_last=*/false);
    const int32_t take = std::min(n_feed, budget);
    Slot& s = slots_[static_cast<size_t>(job.slot)];
    if (take <= 0 || !cache_->reserve(job.slot, take)) continue;
    const auto start = static_cast<int32_t>(s.fed.size());
    batch_.add_sequence(job.slot, start, job.tokens.subspan(s.fed.size(), static_cast<size_t>(take)),
                        LogitRows::kNone);
    s.fed.insert(s.fed.end(), job.tokens.begin() + start, job.tokens.begin() + start + take);
    budget -= take;
  }
  if (batch_.n_tokens() > 0) model_.forward(batch_, *cache_, logits_.data());
}

void DraftModel::propose(std::span<DraftJob> jobs) {
  if (jobs.size() > slots_.size()) throw Error("draft model: more jobs than slots");
  job_rows_.assign(jobs.size(), -1);
  job_drafting_.assign(jobs.size(), 0);
  const int32_t max_context = cache_->max_context();

  // Round 0: every job's unfed confirmed tokens, ending in its last sampled token.
  batch_.clear();
  int32_t budget = max_step_tokens_;
  int32_t rows = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    DraftJob& job = jobs[i];
    job.drafts->clear();
    if (job.n_draft <= 0 || job.tokens.empty()) continue;
    if (job.n_draft > max_draft_)
      throw Error(str_cat("draft model: ", job.n_draft, " drafts asked, at most ", max_draft_));
    if (static_cast<int64_t>(job.tokens.size()) > max_context) continue;
    const int32_t n_feed = sync(job);
    const int32_t take = std::min(n_feed, budget);
    Slot& s = slots_[static_cast<size_t>(job.slot)];
    if (take <= 0 || !cache_->reserve(job.slot, take)) continue;
    const bool whole = take == n_feed;
    const auto start = static_cast<int32_t>(s.fed.size());
    batch_.add_sequence(job.slot, start, job.tokens.subspan(s.fed.size(), static_cast<size_t>(take)),
                        whole ? LogitRows::kLast : LogitRows::kNone);
    s.fed.insert(s.fed.end(), job.tokens.begin() + start, job.tokens.begin() + start + take);
    budget -= take;
    if (whole) {
      job_rows_[i] = rows++;
      job_drafting_[i] = 1;
    }
  }
  if (batch_.n_tokens() == 0) return;
  model_.forward(batch_, *cache_, logits_.data());
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (job_drafting_[i]) draw(jobs[i], 0, logits_.data() + static_cast<size_t>(job_rows_[i]) * n_vocab_);
  }

  // Round j: feed each job's draft j, draw draft j + 1. The fed drafts are tentative.
  for (int32_t j = 1;; ++j) {
    batch_.clear();
    rows = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
      DraftJob& job = jobs[i];
      Slot& s = slots_[static_cast<size_t>(job.slot)];
      if (!job_drafting_[i] || static_cast<int32_t>(job.drafts->size()) >= job.n_draft ||
          static_cast<int32_t>(s.fed.size()) + 1 > max_context || !cache_->reserve(job.slot, 1)) {
        job_drafting_[i] = 0;
        continue;
      }
      const int32_t token = job.drafts->back();
      batch_.add_sequence(job.slot, static_cast<int32_t>(s.fed.size()), std::span<const int32_t>(&token, 1),
                          LogitRows::kLast, /*n_tentative=*/j);
      s.fed.push_back(token);
      job_rows_[i] = rows++;
    }
    if (batch_.n_tokens() == 0) return;
    model_.forward(batch_, *cache_, logits_.data());
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (job_drafting_[i]) draw(jobs[i], j, logits_.data() + static_cast<size_t>(job_rows_[i]) * n_vocab_);
    }
  }
}

}  // namespace ridge
