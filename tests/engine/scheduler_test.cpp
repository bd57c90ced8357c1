// The scheduler without a model: which sequences get how many tokens each step, admission
// under the token budget and the sequence cap, preemption order, prefix-cache admission.
// The "forward pass" here only commits the scheduled tokens, as Model::forward does.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <deque>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"

namespace ridge {
namespace {

constexpr int32_t kBlock = 4;

KvCacheConfig config(int32_t n_blocks, int32_t max_sequences, int32_t max_step_tokens,
                     bool prefix_cache = false) {
  KvCacheConfig c;
  c.layers = {KvLayerSpec{1, 16, 0}};  // 512 bytes per 4-token block
  c.block_size = kBlock;
  c.budget_bytes = static_cast<size_t>(n_blocks) * 512;
  c.max_sequences = max_sequences;
  c.max_context = 64;
  c.max_step_tokens = max_step_tokens;
  c.prefix_cache = prefix_cache;
  return c;
}

// A chunk as "name:start+n" with a trailing "*" when it needs logits.
struct Harness {
  KvCache cache;
  Scheduler scheduler;
  std::deque<SequenceState> sequences;  // stable addresses
  std::vector<std::string> names;

  Harness(const KvCacheConfig& c, int32_t max_running, int32_t max_batch_tokens)
      : cache(c), scheduler({max_running, max_batch_tokens, 16}, cache) {}

  SequenceState& add(const std::string& name, int32_t n_prompt, int32_t first_token = 100) {
    SequenceState& s = sequences.emplace_back();
    s.tokens.resize(static_cast<size_t>(n_prompt));
    std::iota(s.tokens.begin(), s.tokens.end(), first_token);
    s.n_prompt = n_prompt;
    names.push_back(name);
    scheduler.add(&s);
    return s;
  }

  std::string name(const SequenceState* s) const {
    for (size_t i = 0; i < sequences.size(); ++i) {
      if (&sequences[i] == s) return names[i];
    }
    return "?";
  }

  // Plans a step, "runs" it (commits, samples token 7 where logits are due) and returns
  // the plan as text.
  std::string step() {
    const SchedulerStep& plan = scheduler.schedule();
    std::string out;
    for (const ScheduledChunk& c : plan.chunks) {
      if (!out.empty()) out += " ";
      out += name(c.sequence) + ":" + std::to_string(c.start) + "+" + std::to_string(c.n_tokens) +
             (c.n_draft > 0 ? "(" + std::to_string(c.n_draft) + "d)" : "") + (c.needs_logits ? "*" : "");
      cache.commit(c.sequence->slot, c.n_tokens);
    }
    for (const SequenceState* s : plan.preempted) out += " preempt:" + name(s);
    for (const SequenceState* s : plan.failed) out += " fail:" + name(s);
    scheduler.complete_step();
    for (const ScheduledChunk& c : plan.chunks) {
      if (c.n_draft > 0) scheduler.settle_drafts(c.sequence, std::min(accept, c.n_draft));
      if (c.needs_logits) c.sequence->tokens.push_back(7);
    }
    return out;
  }

  // Proposes n drafts (tokens 50, 51, ...) after s's last sampled token.
  void draft(SequenceState& s, int32_t n) {
    for (int32_t i = 0; i < n; ++i) s.tokens.push_back(50 + i);
    s.n_draft = n;
  }
  int32_t accept = 0;  // drafts the "verifier" keeps each step
};

TEST(Scheduler, DecodesFirstThenChunkedPrefillWithinTheTokenBudget) {
  Harness h(config(32, 4, 8), 4, 8);
  h.add("A", 3);
  h.add("B", 10);
  h.add("C", 2);
  // A fits whole; B gets the rest of the budget; C waits (no budget left).
  EXPECT_EQ(h.step(), "A:0+3* B:0+5");
  EXPECT_EQ(h.scheduler.n_waiting(), 1);
  // A decodes first; B's last 5 tokens; C admitted with the 2 that are left.
  EXPECT_EQ(h.step(), "A:3+1* B:5+5* C:0+2*");
  EXPECT_EQ(h.step(), "A:4+1* B:10+1* C:2+1*");
  EXPECT_EQ(h.scheduler.n_running(), 3);
  EXPECT_EQ(h.sequences[1].n_computed, 11);
  EXPECT_EQ(h.cache.n_tokens(h.sequences[1].slot), 11);
}

TEST(Scheduler, RunningDecodesComeBeforeAnOlderRequestsLongRecompute) {
  // With a budget of 4, decodes of younger sequences are not starved by a long prefill.
  Harness h(config(32, 4, 4), 2, 4);
  h.add("A", 2);
  h.add("B", 9);
  EXPECT_EQ(h.step(), "A:0+2* B:0+2");
  EXPECT_EQ(h.step(), "A:2+1* B:2+3");
  EXPECT_EQ(h.step(), "A:3+1* B:5+3");
  EXPECT_EQ(h.step(), "A:4+1* B:8+1*");
  EXPECT_EQ(h.step(), "A:5+1* B:9+1*");
}

TEST(Scheduler, SequenceCapAdmitsTheNextOneWhenASlotFrees) {
  Harness h(config(32, 2, 16), 2, 16);
  SequenceState& a = h.add("A", 2);
  h.add("B", 2);
  h.add("C", 3);
  EXPECT_EQ(h.step(), "A:0+2* B:0+2*");
  EXPECT_EQ(h.scheduler.n_waiting(), 1);
  EXPECT_EQ(h.step(), "A:2+1* B:2+1*");
  const int32_t a_slot = a.slot;
  h.scheduler.finish(&a);  // finished: blocks back at once
  EXPECT_EQ(a.status, SequenceStatus::kFinished);
  EXPECT_EQ(h.cache.n_used_blocks(0), 1);  // only B's block
  EXPECT_EQ(h.step(), "B:3+1* C:0+3*");
  EXPECT_EQ(h.sequences[2].slot, a_slot);
}

TEST(Scheduler, AdmissionKeepsQueueOrderWhenTheHeadDoesNotFit) {
  Harness h(config(4, 4, 32), 4, 32);
  h.add("A", 8);   // 2 blocks
  h.add("B", 12);  // 3 blocks: does not fit beside A
  h.add("C", 2);   // would fit, but must not overtake B
  EXPECT_EQ(h.step(), "A:0+8*");
  EXPECT_EQ(h.scheduler.n_waiting(), 2);
  EXPECT_EQ(h.cache.n_sequences(), 1);  // B's trial admission was undone
  h.scheduler.finish(&h.sequences[0]);
  EXPECT_EQ(h.step(), "B:0+12* C:0+2*");
  EXPECT_EQ(h.step(), "B:12+1* preempt:C");  // B's 4th block is C's
}

TEST(Scheduler, PreemptsTheYoungestAndRecomputesItsTokensLater) {
  // 6 blocks; three 7-token prompts take 2 blocks each. Position 8 needs a third block.
  Harness h(config(6, 3, 32), 3, 32);
  SequenceState& a = h.add("A", 7);
  SequenceState& b = h.add("B", 7);
  SequenceState& c = h.add("C", 7);
  EXPECT_EQ(h.step(), "A:0+7* B:0+7* C:0+7*");
  EXPECT_EQ(h.step(), "A:7+1* B:7+1* C:7+1*");
  EXPECT_EQ(h.cache.n_free_blocks(0), 0);
  // A needs a block: C (youngest) is preempted; B then takes C's other block.
  EXPECT_EQ(h.step(), "A:8+1* B:8+1* preempt:C");
  EXPECT_EQ(c.status, SequenceStatus::kWaiting);
  EXPECT_EQ(c.n_computed, 0);
  EXPECT_EQ(c.tokens.size(), 9u);  // prompt + 2 generated, kept
  EXPECT_EQ(c.n_preemptions, 1);
  EXPECT_EQ(h.scheduler.stats().preemptions, 1u);
  EXPECT_EQ(h.scheduler.waiting()[0], &c);
  EXPECT_EQ(h.step(), "A:9+1* B:9+1*");  // no room to bring C back
  h.scheduler.finish(&a);
  // C comes back: all 9 tokens (generated ones included) recomputed in one chunk.
  EXPECT_EQ(h.step(), "B:10+1* C:0+9*");
  EXPECT_EQ(c.tokens.size(), 10u);
  EXPECT_EQ(b.n_preemptions, 0);
}

TEST(Scheduler, ASequenceMayPreemptItselfAndVictimsQueueOldestFirst) {
  Harness h(config(5, 3, 32), 3, 32);
  SequenceState& a = h.add("A", 12);  // 3 blocks
  SequenceState& b = h.add("B", 3);   // 1 block
  h.add("C", 3);                      // 1 block
  EXPECT_EQ(h.step(), "A:0+12* B:0+3* C:0+3*");
  // A's position 12 needs a 4th block: C (youngest) goes; B's position 3 fits its block.
  EXPECT_EQ(h.step(), "A:12+1* B:3+1* preempt:C");
  // B's position 4 needs a block and B is now the youngest: it preempts itself.
  EXPECT_EQ(h.step(), "A:13+1* preempt:B");
  EXPECT_EQ(b.tokens.size(), 5u);
  EXPECT_EQ(h.scheduler.stats().preemptions, 2u);
  // B (older) is queued ahead of C; neither fits beside A (1 block free, B needs 2).
  ASSERT_EQ(h.scheduler.n_waiting(), 2);
  EXPECT_EQ(h.name(h.scheduler.waiting()[0]), "B");
  EXPECT_EQ(h.name(h.scheduler.waiting()[1]), "C");
  EXPECT_EQ(h.step(), "A:14+1*");
  EXPECT_EQ(h.step(), "A:15+1*");
  EXPECT_EQ(h.step(), "A:16+1*");  // A's 5th block
  h.scheduler.finish(&a);
  EXPECT_EQ(h.step(), "B:0+5* C:0+4*");
}

TEST(Scheduler, ASequenceThatCanNeverFitFailsInsteadOfLooping) {
  Harness h(config(2, 2, 32), 2, 32);  // 8 tokens in all
  SequenceState& a = h.add("A", 7);
  EXPECT_EQ(h.step(), "A:0+7*");
  EXPECT_EQ(h.step(), "A:7+1*");
  EXPECT_EQ(h.step(), " fail:A");
  EXPECT_EQ(a.status, SequenceStatus::kFinished);
  EXPECT_EQ(h.cache.n_used_blocks(0), 0);
  EXPECT_TRUE(h.scheduler.idle());
}

TEST(Scheduler, AdmissionStartsAfterThePrefixCacheHit) {
  Harness h(config(16, 4, 32, /*prefix_cache=*/true), 4, 32);
  SequenceState& a = h.add("A", 10);
  EXPECT_EQ(h.step(), "A:0+10*");
  EXPECT_EQ(h.scheduler.stats().prefix_queries, 2u);  // (10 - 1) / 4 full blocks looked up
  EXPECT_EQ(h.scheduler.stats().prefix_hits, 0u);
  SequenceState& b = h.add("B", 10);  // same prompt: blocks 0 and 1 reused
  EXPECT_EQ(h.step(), "A:10+1* B:8+2*");
  EXPECT_EQ(b.n_cached_prompt, 8);
  EXPECT_EQ(a.n_cached_prompt, 0);
  EXPECT_EQ(h.scheduler.stats().prefix_queries, 4u);
  EXPECT_EQ(h.scheduler.stats().prefix_hits, 2u);
  EXPECT_EQ(h.cache.block_table(a.slot, 0)[0], h.cache.block_table(b.slot, 0)[0]);
}

// A hybrid (a recurrent layer beside the attention one) keeps 4 state checkpoints: prefill
// chunks end where the prefix cache will want to resume a recurrence.
KvCacheConfig hybrid_config() {
  KvCacheConfig c = config(32, 2, 32, /*prefix_cache=*/true);
  c.layers.push_back(KvLayerSpec{0, 0, 0, 8});
  c.budget_bytes += 64 * 1024;
  c.state_checkpoints = 4;
  return c;
}

TEST(Scheduler, AHybridsPrefillEndsAtItsLastFullBlockWhichIsCheckpointed) {
  Harness h(hybrid_config(), 2, 32);
  SequenceState& a = h.add("A", 14);
  // 14 tokens: the chunk stops at 12 (3 full blocks) and the state there is kept.
  EXPECT_EQ(h.step(), "A:0+12");
  EXPECT_EQ(h.scheduler.stats().state_checkpoints, 1u);
  EXPECT_EQ(h.step(), "A:12+2*");
  EXPECT_EQ(h.step(), "A:14+1*");  // decodes checkpoint nothing
  EXPECT_EQ(h.scheduler.stats().state_checkpoints, 1u);
  h.scheduler.finish(&a);
  // The same prompt and 6 more tokens: resumes at 12, its own last full block is 16.
  SequenceState& b = h.add("B", 20);
  EXPECT_EQ(h.step(), "B:12+4");
  EXPECT_EQ(b.n_cached_prompt, 12);
  EXPECT_EQ(h.step(), "B:16+4*");
  EXPECT_EQ(h.scheduler.stats().state_checkpoints, 2u);
  EXPECT_EQ(h.cache.n_checkpoints_held(), 2);
}

TEST(Scheduler, AHybridCheckpointsASharedPrefixItsKvMatchedWithoutAState) {
  Harness h(hybrid_config(), 2, 32);
  auto prompt = [&](const std::string& name, int32_t tail_first) -> SequenceState& {
    SequenceState& s = h.add(name, 14);  // 8 shared "system prompt" tokens, then its own 6
    for (int32_t i = 8; i < 14; ++i) s.tokens[static_cast<size_t>(i)] = tail_first + i;
    return s;
  };
  SequenceState& a = prompt("A", 200);
  EXPECT_EQ(h.step(), "A:0+12");
  h.step();
  h.scheduler.finish(&a);
  // B's K/V matches A's first 2 blocks, but A kept a state only after 3: nothing to resume
  // from, so B computes everything and stops at 8 to checkpoint the shared part.
  SequenceState& b = prompt("B", 300);
  EXPECT_EQ(h.step(), "B:0+8");
  EXPECT_EQ(b.n_cached_prompt, 0);
  EXPECT_EQ(h.step(), "B:8+4");
  EXPECT_EQ(h.step(), "B:12+2*");
  EXPECT_EQ(h.scheduler.stats().state_checkpoints, 3u);
  h.scheduler.finish(&b);
  // A third user of the same system prompt resumes after it.
  SequenceState& c = prompt("C", 400);
  EXPECT_EQ(h.step(), "C:8+4");
  EXPECT_EQ(c.n_cached_prompt, 8);
  EXPECT_EQ(h.scheduler.stats().prefix_hits, 2u);
}

TEST(Scheduler, AHybridsChunksEndOnBlockBoundariesKeptWhileThereIsRoom) {
  Harness h(hybrid_config(), 2, 10);
  SequenceState& a = h.add("A", 14);
  // A 10-token budget: the first chunk ends on the boundary at 8 (a provisional checkpoint),
  // the next at the last full block.
  EXPECT_EQ(h.step(), "A:0+8");
  EXPECT_EQ(h.step(), "A:8+4");
  EXPECT_EQ(h.step(), "A:12+2*");
  EXPECT_EQ(h.scheduler.stats().state_checkpoints, 2u);
  h.scheduler.finish(&a);
  // Another prompt with A's first 8 tokens resumes from the provisional checkpoint.
  SequenceState& b = h.add("B", 14);
  for (size_t i = 8; i < 14; ++i) b.tokens[i] = 500 + static_cast<int32_t>(i);
  EXPECT_EQ(h.step(), "B:8+4");
  EXPECT_EQ(b.n_cached_prompt, 8);
}

TEST(Scheduler, AHybridWithoutPrefixReuseChunksAsBefore) {
  Harness h(hybrid_config(), 2, 32);
  SequenceState& a = h.add("A", 14);
  a.reuse_prefix = false;
  EXPECT_EQ(h.step(), "A:0+14*");
  EXPECT_EQ(h.scheduler.stats().state_checkpoints, 0u);
}

TEST(Scheduler, FinishRemovesWaitingSequencesToo) {
  Harness h(config(16, 1, 16), 1, 16);
  h.add("A", 2);
  SequenceState& b = h.add("B", 2);
  EXPECT_EQ(h.step(), "A:0+2*");
  h.scheduler.finish(&b);
  EXPECT_EQ(h.scheduler.n_waiting(), 0);
  EXPECT_EQ(h.step(), "A:2+1*");
}

TEST(Scheduler, DraftsRideWithTheirDecodeAndRejectedOnesRollBack) {
  Harness h(config(32, 4, 16), 4, 16);
  SequenceState& a = h.add("A", 5);
  EXPECT_EQ(h.step(), "A:0+5*");
  h.draft(a, 3);
  h.accept = 1;
  EXPECT_EQ(h.step(), "A:5+4(3d)*");
  // Kept: the decoded token, draft 50, the verifier's 7; drafts 51 and 52 are gone.
  EXPECT_EQ(a.tokens, (std::vector<int32_t>{100, 101, 102, 103, 104, 7, 50, 7}));
  EXPECT_EQ(a.n_computed, 7);
  EXPECT_EQ(a.n_draft, 0);
  EXPECT_EQ(h.cache.n_tokens(a.slot), 7);
  EXPECT_EQ(h.cache.n_used_blocks(0), 2);
  EXPECT_EQ(h.step(), "A:7+1*");
  h.draft(a, 4);
  h.accept = 4;  // all kept: n_computed catches up with the drafts
  EXPECT_EQ(h.step(), "A:8+5(4d)*");
  EXPECT_EQ(a.n_computed, 13);
  EXPECT_EQ(a.tokens.size(), 14u);
  EXPECT_EQ(h.step(), "A:13+1*");
}

TEST(Scheduler, DraftsTakeOnlyTheBudgetLeftAfterEveryDecode) {
  Harness h(config(32, 4, 8), 4, 8);
  SequenceState& a = h.add("A", 2);
  h.add("B", 2);
  EXPECT_EQ(h.step(), "A:0+2* B:0+2*");
  h.add("C", 3);
  h.draft(a, 8);
  // B's decode first; A's drafts get the 6 tokens left, so C waits a step.
  EXPECT_EQ(h.step(), "A:2+7(6d)* B:2+1*");
  EXPECT_EQ(h.scheduler.n_waiting(), 1);
  EXPECT_EQ(a.tokens.size(), 4u);  // the 2 that did not fit were dropped; none accepted
  EXPECT_EQ(h.step(), "A:3+1* B:3+1* C:0+3*");
}

TEST(Scheduler, DraftsNeverPreemptAndPreemptionDropsThem) {
  // 4 blocks of 4: A (7 tokens) and B (7) hold 2 each, all blocks taken.
  Harness h(config(4, 2, 16), 2, 16);
  SequenceState& a = h.add("A", 7);
  SequenceState& b = h.add("B", 6);
  EXPECT_EQ(h.step(), "A:0+7* B:0+6*");
  // A's drafts need a third block: dropped instead of preempting B.
  h.draft(a, 3);
  EXPECT_EQ(h.step(), "A:7+1* B:6+1*");
  EXPECT_EQ(a.n_draft, 0);
  EXPECT_EQ(a.tokens.size(), 9u);
  EXPECT_EQ(h.scheduler.stats().preemptions, 0u);
  // B's drafts fit its own block, but A's next token needs a block: B is preempted and
  // goes back to the queue without its drafts.
  h.draft(b, 1);
  EXPECT_EQ(h.step(), "A:8+1* preempt:B");
  EXPECT_EQ(b.n_draft, 0);
  EXPECT_EQ(b.tokens.size(), 8u);
  EXPECT_EQ(b.status, SequenceStatus::kWaiting);
  EXPECT_THROW(h.scheduler.settle_drafts(&a, 1), Error);  // no drafts to settle
}

TEST(Scheduler, RejectsOptionsTheCacheCannotServe) {
  KvCache cache(config(16, 2, 16));
  EXPECT_THROW(Scheduler({3, 16, 4}, cache), Error);  // more running than slots
  EXPECT_THROW(Scheduler({2, 1, 4}, cache), Error);   // budget below one token each
  EXPECT_THROW(Scheduler({2, 32, 4}, cache), Error);  // chunks past max_step_tokens
  Harness h(config(16, 2, 16), 2, 16);
  SequenceState empty;
  EXPECT_THROW(h.scheduler.add(&empty), Error);
}

}  // namespace
}  // namespace ridge
