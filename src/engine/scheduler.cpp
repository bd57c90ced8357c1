#include "engine/scheduler.h"

#include <algorithm>
#include <cassert>

#include "core/error.h"

namespace ridge {
namespace {

template <class T>
void erase_value(std::vector<T>& v, const T& value) {
  auto it = std::find(v.begin(), v.end(), value);
  if (it != v.end()) v.erase(it);
}

int32_t remaining(const SequenceState& s) {
  return static_cast<int32_t>(s.tokens.size()) - s.n_computed;
}

// One step behind, counting its drafts: a decode (of 1 + n_draft tokens).
bool is_decode(const SequenceState& s) { return remaining(s) == 1 + s.n_draft; }

void drop_drafts(SequenceState* s, int32_t n) {
  s->tokens.resize(s->tokens.size() - static_cast<size_t>(n));
  s->n_draft -= n;
}

}  // namespace

Scheduler::Scheduler(const SchedulerOptions& options, KvCache& cache)
    : options_(options), cache_(cache) {
  if (options.max_running < 1 || options.max_running > cache.max_sequences()) {
    throw Error(str_cat("scheduler: max_running ", options.max_running, " outside 1..",
                        cache.max_sequences(), " (the KV cache's sequence slots)"));
  }
  if (options.max_batch_tokens < options.max_running ||
      options.max_batch_tokens > cache.max_step_tokens()) {
    throw Error(str_cat("scheduler: max_batch_tokens ", options.max_batch_tokens,
                        " must be at least max_running ", options.max_running,
                        " and at most the KV cache's max_step_tokens ", cache.max_step_tokens()));
  }
  const auto n_running = static_cast<size_t>(options.max_running);
  running_.reserve(n_running);
  waiting_.reserve(static_cast<size_t>(std::max(options.max_waiting, 0)) + n_running);
  for (int32_t slot = options.max_running - 1; slot >= 0; --slot) free_slots_.push_back(slot);
  step_.chunks.reserve(n_running);
  step_.preempted.reserve(n_running);
  step_.failed.reserve(n_running);
}

void Scheduler::add(SequenceState* s) {
  if (s->tokens.empty()) throw Error("scheduler: add: a sequence needs at least one token");
  if (s->n_draft != 0) throw Error("scheduler: add: a waiting sequence cannot have drafts");
  s->status = SequenceStatus::kWaiting;
  s->n_computed = 0;
  s->slot = -1;
  s->n_scheduled = 0;
  waiting_.push_back(s);
}

void Scheduler::add_chunk(SequenceState* s, int32_t n) {
  assert(n > 0 && n <= budget_);
  s->n_scheduled = n;
  const bool last = s->n_computed + n == static_cast<int32_t>(s->tokens.size());
  step_.chunks.push_back(ScheduledChunk{s, s->n_computed, n, last, last ? s->n_draft : 0});
  step_.n_tokens += n;
  budget_ -= n;
}

bool Scheduler::checkpoints(const SequenceState& s) const {
  return s.reuse_prefix && cache_.state_checkpoints() > 0;
}

int32_t Scheduler::prefill_length(const SequenceState& s) const {
  int32_t n = std::min(remaining(s), budget_);
  if (!checkpoints(s)) return n;
  const int32_t bs = cache_.block_size();
  const int32_t last_full = (static_cast<int32_t>(s.tokens.size()) - 1) / bs * bs;
  for (const int32_t at : {s.checkpoint_at, last_full})  // the earlier one first
    if (at > s.n_computed && at < s.n_computed + n) n = at - s.n_computed;
  // A chunk that does not end the prompt ends on a block boundary, where a state can be kept.
  if (n < remaining(s)) {
    const int32_t aligned = (s.n_computed + n) / bs * bs - s.n_computed;
    if (aligned > 0) n = aligned;
  }
  return n;
}

void Scheduler::release_slot(SequenceState* s) {
  cache_.free_sequence(s->slot);
  free_slots_.push_back(s->slot);
  s->slot = -1;
  s->n_computed = 0;
}

void Scheduler::preempt_youngest() {
  SequenceState* victim = running_.back();
  running_.pop_back();
  if (victim->n_scheduled > 0) {  // drop its chunk from this step
    for (auto it = step_.chunks.begin(); it != step_.chunks.end(); ++it) {
      if (it->sequence != victim) continue;
      budget_ += it->n_tokens;
      step_.n_tokens -= it->n_tokens;
      step_.chunks.erase(it);
      break;
    }
    victim->n_scheduled = 0;
  }
  drop_drafts(victim, victim->n_draft);  // recomputed later as a prompt: drafts would pass as real
  release_slot(victim);
  victim->status = SequenceStatus::kWaiting;
  ++victim->n_preemptions;
  ++stats_.preemptions;
  waiting_.insert(waiting_.begin(), victim);
  step_.preempted.push_back(victim);
}

bool Scheduler::reserve_or_preempt(SequenceState* s, int32_t n) {
  while (!cache_.reserve(s->slot, n)) {
    const bool alone = running_.size() == 1;
    const bool self = running_.back() == s;
    if (self && alone) {  // even an otherwise empty cache cannot hold it
      running_.pop_back();
      release_slot(s);
      s->status = SequenceStatus::kFinished;
      step_.failed.push_back(s);
      return false;
    }
    preempt_youngest();
    if (self) return false;
  }
  return true;
}

bool Scheduler::admit(SequenceState* s) {
  const int32_t slot = free_slots_.back();
  cache_.add_sequence(slot);
  s->slot = slot;
  const int32_t cached = s->reuse_prefix ? cache_.attach_prefix(slot, s->tokens) : 0;
  s->n_computed = cached;
  const int32_t matched = cache_.prefix_blocks_matched(slot) * cache_.block_size();
  s->checkpoint_at = checkpoints(*s) && matched > cached ? matched : 0;
  const int32_t n = prefill_length(*s);
  if (!cache_.reserve(slot, n)) {
    cache_.free_sequence(slot);
    s->slot = -1;
    s->n_computed = 0;
    return false;
  }
  free_slots_.pop_back();
  if (cache_.prefix_cache_enabled()) {
    stats_.prefix_queries += (s->tokens.size() - 1) / static_cast<size_t>(cache_.block_size());
    stats_.prefix_hits += static_cast<uint64_t>(cached / cache_.block_size());
  }
  if (!s->admitted_before) s->n_cached_prompt = std::min(cached, s->n_prompt);
  s->admitted_before = true;
  s->status = SequenceStatus::kRunning;
  running_.push_back(s);
  add_chunk(s, n);
  return true;
}

const SchedulerStep& Scheduler::schedule() {
  step_.chunks.clear();
  step_.preempted.clear();
  step_.failed.clear();
  step_.n_tokens = 0;
  budget_ = options_.max_batch_tokens;
  for (SequenceState* s : running_) s->n_scheduled = 0;

  // 1. Decodes, oldest first. Preemption pops from the back, which is never behind i.
  // Drafts come after every plain decode has its token, so they never crowd one out.
  for (size_t i = 0; i < running_.size() && budget_ > 0; ++i) {
    SequenceState* s = running_[i];
    if (!is_decode(*s)) continue;
    if (s->n_draft > 0 && !cache_.can_reserve(s->slot, 1 + s->n_draft)) drop_drafts(s, s->n_draft);
    if (reserve_or_preempt(s, 1)) add_chunk(s, 1);
  }
  for (ScheduledChunk& c : step_.chunks) {  // then each decode's drafts, as far as they fit
    SequenceState* s = c.sequence;
    if (s->n_draft == 0) continue;
    const int32_t n = std::min(s->n_draft, budget_);
    drop_drafts(s, s->n_draft - n);
    c.needs_logits = true;  // add_chunk saw the drafts after the decode's token
    if (n == 0 || !cache_.reserve(s->slot, 1 + n)) {  // blocks taken by a later decode
      drop_drafts(s, s->n_draft);
      continue;
    }
    s->n_scheduled += n;
    c.n_tokens += n;
    c.n_draft = n;
    step_.n_tokens += n;
    budget_ -= n;
  }
  // 2. Unfinished prefills and recomputation, oldest first, as much as the budget allows.
  for (size_t i = 0; i < running_.size() && budget_ > 0; ++i) {
    SequenceState* s = running_[i];
    if (s->n_scheduled > 0 || is_decode(*s)) continue;
    const int32_t n = prefill_length(*s);
    if (reserve_or_preempt(s, n)) add_chunk(s, n);
  }
  // 3. Admission in queue order, unless this step had to preempt (blocks are short).
  if (step_.preempted.empty()) {
    while (budget_ > 0 && !waiting_.empty() && !free_slots_.empty() &&
           static_cast<int32_t>(running_.size()) < options_.max_running) {
      if (!admit(waiting_.front())) break;
      waiting_.erase(waiting_.begin());
    }
  }
  return step_;
}

void Scheduler::complete_step() {
  for (const ScheduledChunk& c : step_.chunks) {
    SequenceState* s = c.sequence;
    s->n_computed += c.n_tokens;
    s->n_scheduled = 0;
    assert(cache_.n_tokens(s->slot) == s->n_computed);
    if (!checkpoints(*s) || c.n_draft > 0) continue;
    const int32_t bs = cache_.block_size();
    const int32_t last_full = (static_cast<int32_t>(s->tokens.size()) - 1) / bs * bs;
    if (s->n_computed % bs != 0 || s->n_computed > last_full) continue;  // a decode, or not a boundary
    const bool kept = s->n_computed == s->checkpoint_at || s->n_computed == last_full;
    stats_.state_checkpoints += cache_.save_checkpoint(s->slot, /*provisional=*/!kept);
  }
}

void Scheduler::settle_drafts(SequenceState* s, int32_t n_accepted) {
  if (n_accepted < 0 || n_accepted > s->n_draft) {
    throw Error(str_cat("scheduler: settle_drafts: ", n_accepted, " accepted of ", s->n_draft, " drafts"));
  }
  const int32_t n_rejected = s->n_draft - n_accepted;
  drop_drafts(s, n_rejected);
  s->n_draft = 0;
  if (s->status != SequenceStatus::kRunning) return;
  s->n_computed = std::min(s->n_computed, static_cast<int32_t>(s->tokens.size()));
  cache_.truncate(s->slot, s->n_computed);
}

void Scheduler::finish(SequenceState* s) {
  if (s->n_draft > 0) drop_drafts(s, s->n_draft);
  if (s->status == SequenceStatus::kRunning) {
    erase_value(running_, s);
    release_slot(s);
  } else if (s->status == SequenceStatus::kWaiting) {
    erase_value(waiting_, s);
  }
  s->n_scheduled = 0;
  s->status = SequenceStatus::kFinished;
}

}  // namespace ridge
