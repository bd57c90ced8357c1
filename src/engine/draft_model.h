// A smaller model with the target's vocabulary that drafts tokens for the engine's
// decoding requests: one batched forward pass per drafted position over all requests,
// on a paged KV cache of its own whose sequences mirror the engine's slots. Each call
// first brings a slot's cache in line with the request's confirmed tokens (rolling back
// drafts the target rejected, feeding what is new), so it follows the target through
// rejections, preemption and reused slots without being told.
//
//   DraftModel draft(*small, size_engine(*small, options), /*max_draft=*/8);
//   DraftJob job{.slot = 0, .owner = id, .tokens = confirmed, .n_draft = 4, .sampler = &s,
//                .q = rows, .drafts = &out};
//   draft.propose({&job, 1});     // out: up to 4 tokens; rows: the distribution of each
//   draft.release(0, id);         // the request left slot 0: its blocks go back now
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "kv/kv_cache.h"
#include "model/batch.h"
#include "model/model.h"

namespace ridge {

struct DraftJob {
  int32_t slot = 0;                   // the request's engine slot (KV sequence)
  uint64_t owner = 0;                 // the request's id: a new owner starts the slot afresh
  std::span<const int32_t> tokens;    // confirmed: prompt + generated; the last one was
                                      // sampled and is not yet computed by the target
  int32_t n_draft = 0;                // tokens wanted
  Sampler* sampler = nullptr;         // draws the drafts with the request's parameters
  float* q = nullptr;                 // [n_draft][n_vocab] out: each draft's distribution;
                                      // may be null for a greedy sampler (one-hot anyway)
  std::vector<int32_t>* drafts = nullptr;  // out: n_draft tokens or fewer (cache or budget short)
};

class DraftModel {
 public:
  // kv: size_engine() of the draft model under the engine's options (same slots, context
  // and KV type); max_draft: most tokens one job may ask for.
  DraftModel(Model& model, const KvCacheConfig& kv, int32_t max_step_tokens, int32_t max_draft);

  // Drafts for every job (distinct slots). A job whose catch-up does not fit this call's
  // token budget is fed part of it and gets no drafts this time.
  void propose(std::span<DraftJob> jobs);
  // Brings each job's slot up to its tokens (all of them: confirmed and computed by the
  // target this step), drafting nothing; n_draft, sampler, q and drafts are unused. The
  // engine calls it for the target's prefill chunks, so that the draft reads a prompt
  // in the same steps as the target instead of at its first decode.
  void follow(std::span<const DraftJob> jobs);
  // The request `owner` left this slot (finished, cancelled, preempted): its blocks go
  // back now. Nothing happens if the slot already belongs to another request.
  void release(int32_t slot, uint64_t owner);

  const Model& model() const { return model_; }
  const KvCache& cache() const { return *cache_; }
  int32_t n_used_blocks() const;  // over all groups

 private:
  struct Slot {
    uint64_t owner = 0;
    bool active = false;
    std::vector<int32_t> fed;  // exactly the tokens in the cache, oldest first
  };
  // Aligns the slot with the job's tokens; returns how many confirmed tokens to feed.
  // keep_last: the last token is fed again if already in the cache (its logits are due).
  int32_t sync(const DraftJob& job, bool keep_last = true);
  void draw(DraftJob& job, int32_t index, float* logits_row);
  void reset(int32_t slot);

  Model& model_;
  std::unique_ptr<KvCache> cache_;
  int32_t max_step_tokens_ = 0;
  int32_t max_draft_ = 0;
  int32_t n_vocab_ = 0;
  std::vector<Slot> slots_;
  Batch batch_;
  std::vector<float> logits_;        // [max_step_tokens][n_vocab]: rows of this round
  std::vector<int32_t> job_rows_;    // [jobs] logit row of each job this round, -1: none
  std::vector<int32_t> job_drafting_;  // [jobs] still drafting
  std::vector<float> scratch_q_;     // [n_vocab] for a greedy job's draws
};

}  // namespace ridge
