// The continuous-batching scheduler: decides, every step, which sequences run and how
// many new tokens each computes, and keeps their KV blocks reserved. Pure bookkeeping over
// the KV cache (no model), so its decisions are tested exactly.
//
//   Scheduler scheduler({.max_running = 8, .max_batch_tokens = 256}, cache);
//   SequenceState r;  r.tokens = prompt;  r.n_prompt = prompt.size();  scheduler.add(&r);
//   const SchedulerStep& step = scheduler.schedule();   // blocks reserved for every chunk
//   for (const ScheduledChunk& c : step.chunks) batch.add_sequence(c.sequence->slot, c.start,
//       span(c.sequence->tokens).subspan(c.start, c.n_tokens), c.needs_logits ? kLast : kNone);
//   model.forward(batch, cache, logits);                // commits the K/V
//   scheduler.complete_step();                          // n_computed += n_tokens
//   r.tokens.push_back(sampled);  or  scheduler.finish(&r);   // finish frees blocks at once
//
// One rule, as in vLLM v1: a sequence's tokens are its prompt and what it generated so
// far, n_computed of them have K/V in the cache, and a step lets n_computed catch up to
// tokens.size(). There are no prefill and decode phases: a decode is a sequence one token
// behind, a prefill chunk one many tokens behind, a preempted sequence one whose
// n_computed was reset to 0 (recomputed from its tokens, generated ones included).
//
// Each step, within max_batch_tokens tokens:
//  1. Running sequences one token behind (decodes) get that token, oldest first.
//  2. Running sequences further behind (unfinished prefills, recomputation) get as many
//     tokens as the budget leaves, oldest first (chunked prefill).
//  3. If nothing was preempted this step, waiting sequences are admitted in queue order
//     while the budget, a free slot (max_running) and KV blocks last; an admitted sequence
//     first takes what the prefix cache holds of its tokens. Admission never preempts and
//     never skips the queue head (no starvation of long prompts).
// Speculative decoding: a running sequence may end its tokens with n_draft proposed
// tokens (drafts) after the last sampled one. It counts as a decode of 1 + n_draft
// tokens, scheduled in step 1 whole; drafts never cost anyone else their place: those
// the budget has no room for are dropped, and if the blocks for the drafts are short the
// drafts are dropped before anything is preempted. A preempted sequence loses its drafts.
// Dropping pops them from tokens and lowers n_draft; the engine reads both after schedule().
// When a running sequence's reserve fails, the youngest running sequence (last admitted)
// is preempted: its blocks are freed, its chunk (if scheduled this step) dropped, and it
// goes to the FRONT of the waiting queue. If the youngest is the sequence itself and it
// runs alone, it can never fit and is put in step.failed (the engine reports an error);
// the engine's submit checks make that impossible for requests it accepted.
// Hybrid models (recurrent layers) with prefix caching: a prefill chunk ends early at the
// prompt's last full block, and at the end of the K/V the prefix cache matched beyond the
// checkpoint it resumed from (checkpoint_at), and the state there is checkpointed after the
// step (KvCache::save_checkpoint), so the next request with that prefix resumes from it.
// Any other chunk that does not end the prompt ends on a block boundary (when the budget
// reaches one), and its state is kept as a provisional checkpoint while there is room.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/kv_cache.h"

namespace ridge {

struct SchedulerOptions {
  int32_t max_running = 4;         // sequences running at once (<= the cache's slots)
  int32_t max_batch_tokens = 256;  // tokens per step; >= max_running
  int32_t max_waiting = 64;        // capacity reserved for the waiting queue (not a limit)
};

enum class SequenceStatus { kWaiting, kRunning, kFinished };

// What the scheduler knows of one request. The engine owns it and appends sampled tokens.
struct SequenceState {
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int32_t n_prompt = 0;
  int32_t n_computed = 0;       // tokens whose K/V are in the cache
  int32_t n_cached_prompt = 0;  // prompt tokens the prefix cache served at first admission
  int32_t slot = -1;            // KV cache sequence while running, else -1
  int32_t n_preemptions = 0;
  bool admitted_before = false;
  SequenceStatus status = SequenceStatus::kWaiting;
  int32_t n_scheduled = 0;      // tokens in the current step (0: not scheduled)
  int32_t n_draft = 0;          // the last n_draft of tokens are unverified drafts
  bool reuse_prefix = true;     // false: admitted without the prefix cache (every token computed)
  // Hybrid models with prefix caching: where the K/V the prefix cache matched ended beyond
  // the checkpoint it resumed from (0: nowhere). A chunk ends there, so that prefix (a
  // shared system prompt) gets a checkpoint of its own for the next request.
  int32_t checkpoint_at = 0;
};

struct ScheduledChunk {
  SequenceState* sequence = nullptr;
  int32_t start = 0;           // == sequence->n_computed: first token's position
  int32_t n_tokens = 0;
  bool needs_logits = false;   // the chunk reaches the last token: sample after it
  int32_t n_draft = 0;         // the chunk's last n_draft tokens are drafts: logits for
                               // the last 1 + n_draft rows, to verify them
};

struct SchedulerStep {
  std::vector<ScheduledChunk> chunks;        // batch order
  std::vector<SequenceState*> preempted;     // this step, in preemption order
  std::vector<SequenceState*> failed;        // can never fit; blocks freed, status kFinished
  int32_t n_tokens = 0;                      // sum of chunks' n_tokens
};

struct SchedulerStats {
  uint64_t preemptions = 0;
  uint64_t prefix_queries = 0;  // full prompt blocks looked up at admission
  uint64_t prefix_hits = 0;     // of those, found in the prefix cache
  uint64_t state_checkpoints = 0;  // recurrent-state checkpoints written (hybrids)
};

class Scheduler {
 public:
  // Throws ridge::Error if the options do not fit the cache (max_running above its slots,
  // max_batch_tokens below max_running or above the cache's max_step_tokens).
  Scheduler(const SchedulerOptions& options, KvCache& cache);

  // Queues a sequence (status kWaiting, n_computed 0, tokens not empty) at the back.
  void add(SequenceState* sequence);
  // Plans one step and reserves its KV blocks (see the rules above). The result stays
  // valid until the next call.
  const SchedulerStep& schedule();
  // After the forward pass of the last step: every chunk's tokens are computed.
  void complete_step();
  // After complete_step, for a sequence whose chunk carried drafts: the first n_accepted
  // drafts become ordinary tokens; the rest leave tokens, n_computed and the KV cache (as
  // if never scheduled). n_draft becomes 0; the engine then appends the verifier's token.
  void settle_drafts(SequenceState* sequence, int32_t n_accepted);
  // Removes a sequence wherever it is (finished, cancelled): running ones free their
  // blocks now. Status becomes kFinished.
  void finish(SequenceState* sequence);

  int32_t n_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t n_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  std::span<SequenceState* const> running() const { return running_; }  // oldest first
  std::span<SequenceState* const> waiting() const { return waiting_; }  // next first
  const SchedulerStats& stats() const { return stats_; }

 private:
  // Reserves n more tokens for a running sequence, preempting the youngest as needed.
  // False when the sequence itself was preempted (or failed).
  bool reserve_or_preempt(SequenceState* s, int32_t n);
  void preempt_youngest();
  bool admit(SequenceState* s);
  void add_chunk(SequenceState* s, int32_t n);
  void release_slot(SequenceState* s);
  // A hybrid's prefix cache keeps recurrent-state checkpoints of this sequence's blocks.
  bool checkpoints(const SequenceState& s) const;
  int32_t prefill_length(const SequenceState& s) const;  // the next prefill chunk's tokens

  SchedulerOptions options_;
  KvCache& cache_;
  std::vector<SequenceState*> running_;  // admission order: oldest first
  std::vector<SequenceState*> waiting_;  // queue order: next first
  std::vector<int32_t> free_slots_;      // KV sequence slots not in use
  SchedulerStep step_;
  int32_t budget_ = 0;                   // tokens left in the step being planned
  SchedulerStats stats_;
};

}  // namespace ridge
