// The KV cache's second kind of storage: a hybrid model's recurrent layers keep a fixed-size
// state per sequence slot instead of K/V rows (kv/kv_cache.h, "Recurrent state").
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <string>
#include <vector>

#include "core/error.h"
#include "kv/kv_cache.h"

namespace ridge {
namespace {

// Layers 0 and 2 recurrent (100 and 37 floats of state), layer 1 attention: one head of 16,
// a 4-token block of it 2 * 4 * 16 * 4 = 512 bytes in f32.
KvCacheConfig hybrid_config(size_t budget, int32_t max_sequences) {
  KvCacheConfig c;
  c.layers = {KvLayerSpec{0, 0, 0, 100}, KvLayerSpec{1, 16, 0}, KvLayerSpec{0, 0, 0, 37}};
  c.block_size = 4;
  c.dtype = DType::F32;
  c.budget_bytes = budget;
  c.max_sequences = max_sequences;
  c.max_context = 64;
  c.max_step_tokens = 8;
  return c;
}

// Per sequence: 100 -> 112 and 37 -> 48 floats (each layer's state on a cache line).
constexpr size_t kStateBytes = (112 + 48) * sizeof(float);

TEST(RecurrentState, TakesItsShareOfTheBudgetFirstAndKvTheRest) {
  const KvCacheConfig c = hybrid_config(3 * kStateBytes + 10 * 512, 3);
  EXPECT_EQ(kv_state_floats_per_sequence(c), 160);
  KvCache cache(c);
  EXPECT_TRUE(cache.has_recurrent_state());
  EXPECT_EQ(cache.state_bytes_per_sequence(), kStateBytes);
  ASSERT_EQ(cache.n_groups(), 1);  // the recurrent layers join no group
  EXPECT_EQ(cache.group(0).layers, std::vector<int32_t>{1});
  EXPECT_EQ(cache.group(0).n_blocks, 10);
  EXPECT_EQ(cache.bytes_per_token(), 2u * 16 * sizeof(float));  // only the attention layer's K/V
  EXPECT_LE(cache.total_bytes(), c.budget_bytes);
  EXPECT_NE(cache.summary().find("recurrent state 640.0 B/sequence"), std::string::npos) << cache.summary();
  EXPECT_EQ(cache.group_of_layer(0), -1);
  EXPECT_THROW(cache.layer(0), Error);
  EXPECT_NO_THROW(cache.layer(1));
}

TEST(RecurrentState, ABudgetThatCannotHoldEveryStateIsAnErrorNamingIt) {
  try {
    KvCache cache(hybrid_config(3 * kStateBytes, 3));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("recurrent state of 3 sequences"), std::string::npos) << e.what();
  }
}

TEST(RecurrentState, EachSlotHasItsOwnStateZeroedWhenASequenceIsAdded) {
  KvCache cache(hybrid_config(2 * kStateBytes + 8 * 512, 2));
  cache.add_sequence(0);
  cache.add_sequence(1);
  float* a0 = cache.state(0, 0);
  float* b0 = cache.state(2, 0);
  float* a1 = cache.state(0, 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a0) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b0) % 64, 0u);
  for (int i = 0; i < 100; ++i) a0[i] = 1.0f + i;
  for (int i = 0; i < 37; ++i) b0[i] = -1.0f;
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a1[i], 0.0f);  // another slot's state is untouched
  EXPECT_EQ(a0[99], 100.0f);                               // and layer 2's does not overlap layer 0's
  cache.free_sequence(0);
  cache.add_sequence(0);  // a new sequence in the slot starts from zero, not the last one's state
  for (int i = 0; i < 100; ++i) EXPECT_EQ(cache.state(0, 0)[i], 0.0f);
  for (int i = 0; i < 37; ++i) EXPECT_EQ(cache.state(2, 0)[i], 0.0f);
  EXPECT_THROW(cache.state(1, 0), Error);  // an attention layer has no state
}

TEST(RecurrentState, ASequenceCannotBeCutBackAndWithoutCheckpointsPrefixCachingIsOff) {
  KvCacheConfig c = hybrid_config(kStateBytes + 8 * 512, 1);
  c.prefix_cache = true;
  KvCache cache(c);
  EXPECT_FALSE(cache.prefix_cache_enabled());
  cache.add_sequence(0);
  ASSERT_TRUE(cache.reserve(0, 6));
  cache.commit(0, 6);
  EXPECT_NO_THROW(cache.truncate(0, 6));  // to where it is: nothing to undo
  try {
    cache.truncate(0, 5);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("recurrent layers' state"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.n_tokens(0), 6);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  cache.free_sequence(0);
  cache.add_sequence(0);
  EXPECT_EQ(cache.attach_prefix(0, tokens), 0);
}

TEST(RecurrentState, TruncateRestoresTheSnapshotOfTheLastKeptToken) {
  KvCacheConfig c = hybrid_config(1 << 20, 1);
  c.layers[0].state_tail_floats = 10;  // layer 0: 90 floats of state, then a 10-float tail
  c.state_snapshots = 3;
  KvCache cache(c);
  cache.add_sequence(0);
  ASSERT_TRUE(cache.reserve(0, 8));
  cache.commit(0, 5);
  // A verify step of 3 tokens at positions 5, 6, 7 leaves the states after each.
  for (int k = 0; k < 3; ++k) {
    for (int i = 0; i < 90; ++i) cache.state_snapshot(0, 0, k)[i] = 100.0f * (k + 1) + i;
    for (int i = 0; i < 10; ++i) cache.state_snapshot_tail(0, 0, k)[i] = -100.0f * (k + 1) - i;
    for (int i = 0; i < 37; ++i) cache.state_snapshot(2, 0, k)[i] = 1000.0f * (k + 1) + i;
  }
  EXPECT_EQ(cache.state_snapshot(0, 0, 1), cache.state_snapshot(0, 0, 0) + 90);  // first parts contiguous
  for (int i = 0; i < 100; ++i) cache.state(0, 0)[i] = 7.0f;  // the live state: after position 7
  cache.commit(0, 3);
  cache.mark_snapshots(0, 5, 3);
  cache.truncate(0, 7);  // keep positions 0..6: the state after position 6 is snapshot 1
  EXPECT_EQ(cache.n_tokens(0), 7);
  EXPECT_EQ(cache.state(0, 0)[0], 200.0f);
  EXPECT_EQ(cache.state(0, 0)[89], 289.0f);
  EXPECT_EQ(cache.state(0, 0)[90], -200.0f);  // the tail, back after the first part
  EXPECT_EQ(cache.state(0, 0)[99], -209.0f);
  EXPECT_EQ(cache.state(2, 0)[36], 2036.0f);
  // The snapshots are spent: going back again needs a new step's.
  EXPECT_THROW(cache.truncate(0, 6), Error);
  cache.mark_snapshots(0, 7, 1);
  EXPECT_THROW(cache.truncate(0, 6), Error);  // position 7's snapshot cannot give the state after 5
  EXPECT_THROW(cache.mark_snapshots(0, 7, 4), Error);  // more than the cache keeps
}

// Prefix caching on a hybrid: checkpoints of the live state at block boundaries.
KvCacheConfig checkpoint_config(int32_t checkpoints) {
  KvCacheConfig c = hybrid_config(1 << 20, 2);
  c.prefix_cache = true;
  c.state_checkpoints = checkpoints;
  return c;
}

void fill_state(KvCache& cache, int32_t seq, float value) {
  for (int i = 0; i < 100; ++i) cache.state(0, seq)[i] = value + i;
  for (int i = 0; i < 37; ++i) cache.state(2, seq)[i] = -value - i;
}

bool state_is(const KvCache& cache, int32_t seq, float value) {
  for (int i = 0; i < 100; ++i)
    if (cache.state(0, seq)[i] != value + i) return false;
  for (int i = 0; i < 37; ++i)
    if (cache.state(2, seq)[i] != -value - i) return false;
  return true;
}

// Runs tokens through slot seq as a forward pass would: n tokens at a time, the state after
// each chunk set to 1000 * (tokens so far), and a checkpoint asked for after each chunk.
void prefill(KvCache& cache, int32_t seq, const std::vector<int32_t>& tokens, int32_t n) {
  cache.add_sequence(seq);
  int32_t done = cache.attach_prefix(seq, tokens);
  while (done < static_cast<int32_t>(tokens.size())) {
    const int32_t k = std::min(n, static_cast<int32_t>(tokens.size()) - done);
    ASSERT_TRUE(cache.reserve(seq, k));
    cache.commit(seq, k);
    done += k;
    fill_state(cache, seq, 1000.0f * static_cast<float>(done));
    cache.save_checkpoint(seq);
  }
}

TEST(RecurrentState, CheckpointsTakeTheirShareOfTheBudgetAfterTheSlots) {
  const KvCacheConfig c = checkpoint_config(3);
  EXPECT_EQ(kv_state_live_floats(c), 160);
  EXPECT_EQ(kv_state_bytes(c), (2 + 3) * kStateBytes);
  KvCache cache(c);
  EXPECT_TRUE(cache.prefix_cache_enabled());
  EXPECT_EQ(cache.state_checkpoints(), 3);
  EXPECT_EQ(cache.n_checkpoints_held(), 0);
  EXPECT_NE(cache.summary().find("3 prefix checkpoints"), std::string::npos) << cache.summary();
  KvCacheConfig off = c;
  off.prefix_cache = false;  // no prefix cache: checkpoints take nothing
  EXPECT_EQ(kv_state_bytes(off), 2 * kStateBytes);
  KvCacheConfig tight = c;
  tight.budget_bytes = 5 * kStateBytes;
  try {
    KvCache small(tight);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("and 3 prefix-cache checkpoints"), std::string::npos) << e.what();
  }
}

TEST(RecurrentState, APrefixHitResumesFromTheCheckpointOfItsLastBlockBitForBit) {
  KvCache cache(checkpoint_config(4));
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  prefill(cache, 0, tokens, 4);  // checkpoints after 4 and 8 tokens; 11 is no boundary
  EXPECT_EQ(cache.n_checkpoints_held(), 2);
  cache.free_sequence(0);
  cache.add_sequence(1);
  fill_state(cache, 1, 5.0f);  // add_sequence zeroed it; the hit must overwrite this
  EXPECT_EQ(cache.attach_prefix(1, tokens), 8);  // at most (11 - 1) / 4 blocks
  EXPECT_EQ(cache.prefix_blocks_matched(1), 2);
  EXPECT_TRUE(state_is(cache, 1, 8000.0f));
  EXPECT_EQ(cache.n_tokens(1), 8);
}

TEST(RecurrentState, AHitEndsAtTheLastCheckpointTheCachedBlocksReach) {
  KvCache cache(checkpoint_config(4));
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  prefill(cache, 0, tokens, 6);  // boundaries crossed but hit only at 12: one checkpoint
  EXPECT_EQ(cache.n_checkpoints_held(), 1);
  cache.free_sequence(0);
  cache.add_sequence(0);
  EXPECT_EQ(cache.attach_prefix(0, tokens), 12);
  EXPECT_TRUE(state_is(cache, 0, 12000.0f));
  cache.free_sequence(0);
  // The same first 8 tokens, then others: the K/V of 2 blocks is cached, no state after 8.
  const std::vector<int32_t> other = {1, 2, 3, 4, 5, 6, 7, 8, 90, 91, 92, 93, 94};
  cache.add_sequence(0);
  EXPECT_EQ(cache.attach_prefix(0, other), 0);
  EXPECT_EQ(cache.prefix_blocks_matched(0), 2);
  EXPECT_EQ(cache.n_tokens(0), 0);
  // Once the run stops at 8 and checkpoints, the next user of that prefix resumes there.
  ASSERT_TRUE(cache.reserve(0, 8));
  cache.commit(0, 8);
  fill_state(cache, 0, 7.0f);
  EXPECT_TRUE(cache.save_checkpoint(0));
  EXPECT_FALSE(cache.save_checkpoint(0));  // held already
  cache.free_sequence(0);
  const std::vector<int32_t> third = {1, 2, 3, 4, 5, 6, 7, 8, 50, 51, 52};
  cache.add_sequence(1);
  EXPECT_EQ(cache.attach_prefix(1, third), 8);
  EXPECT_TRUE(state_is(cache, 1, 7.0f));
}

TEST(RecurrentState, CheckpointsOnlyAtHashedBlockBoundaries) {
  KvCache cache(checkpoint_config(4));
  cache.add_sequence(0);
  ASSERT_TRUE(cache.reserve(0, 8));
  cache.commit(0, 4);
  EXPECT_FALSE(cache.save_checkpoint(0));  // no tokens given: block 0 has no hash
  cache.set_tokens(0, std::vector<int32_t>{1, 2, 3, 4, 5});
  EXPECT_TRUE(cache.save_checkpoint(0));
  cache.commit(0, 1);
  EXPECT_FALSE(cache.save_checkpoint(0));  // 5 tokens: no boundary
  EXPECT_EQ(cache.n_checkpoints_held(), 1);
  KvCache none(checkpoint_config(0));  // a hybrid without checkpoints reuses nothing
  EXPECT_FALSE(none.prefix_cache_enabled());
  EXPECT_EQ(none.state_checkpoints(), 0);
}

TEST(RecurrentState, TheLeastRecentlyUsedCheckpointMakesRoom) {
  KvCache cache(checkpoint_config(2));
  const std::vector<int32_t> a = {1, 2, 3, 4, 5}, b = {6, 7, 8, 9, 10}, c = {11, 12, 13, 14, 15};
  prefill(cache, 0, a, 4);
  cache.free_sequence(0);
  prefill(cache, 0, b, 4);
  cache.free_sequence(0);
  cache.add_sequence(1);
  EXPECT_EQ(cache.attach_prefix(1, a), 4);  // a's checkpoint is used: b's is now the oldest
  cache.free_sequence(1);
  prefill(cache, 0, c, 4);  // evicts b's
  cache.free_sequence(0);
  EXPECT_EQ(cache.n_checkpoints_held(), 2);
  for (const auto& [tokens, hit] : {std::pair{a, 4}, std::pair{b, 0}, std::pair{c, 4}}) {
    cache.add_sequence(1);
    EXPECT_EQ(cache.attach_prefix(1, tokens), hit) << tokens[0];
    if (hit > 0) {
      EXPECT_TRUE(state_is(cache, 1, 4000.0f));
    }
    cache.free_sequence(1);
  }
}

TEST(RecurrentState, ProvisionalCheckpointsGiveWayAndNeverEvictKeptOnes) {
  KvCache cache(checkpoint_config(2));
  const auto start = [&](const std::vector<int32_t>& tokens, int32_t n) {  // slot 0 on tokens, n reserved
    cache.add_sequence(0);
    cache.set_tokens(0, tokens);
    return cache.reserve(0, n);
  };
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  ASSERT_TRUE(start(a, 9));
  cache.commit(0, 4);
  fill_state(cache, 0, 1.0f);
  EXPECT_TRUE(cache.save_checkpoint(0, /*provisional=*/true));  // after 4: room
  cache.commit(0, 4);
  fill_state(cache, 0, 2.0f);
  EXPECT_TRUE(cache.save_checkpoint(0));  // after 8: kept
  cache.free_sequence(0);
  const std::vector<int32_t> b = {11, 12, 13, 14, 15, 16, 17, 18, 19};
  ASSERT_TRUE(start(b, 9));
  cache.commit(0, 4);
  EXPECT_TRUE(cache.save_checkpoint(0, true));  // evicts a's provisional one, the older kept one stays
  cache.commit(0, 4);
  EXPECT_TRUE(cache.save_checkpoint(0));  // a kept one evicts the provisional one first
  cache.commit(0, 1);
  cache.free_sequence(0);
  const std::vector<int32_t> c = {21, 22, 23, 24, 25, 26, 27, 28, 29};
  ASSERT_TRUE(start(c, 4));
  cache.commit(0, 4);
  EXPECT_FALSE(cache.save_checkpoint(0, true));  // two kept ones: no room for a provisional one
  cache.free_sequence(0);
  EXPECT_EQ(cache.n_checkpoints_held(), 2);
  cache.add_sequence(1);
  EXPECT_EQ(cache.attach_prefix(1, a), 8);
  EXPECT_TRUE(state_is(cache, 1, 2.0f));
}

TEST(RecurrentState, ConfigurationsThatMakeNoSenseAreRefused) {
  KvCacheConfig c = hybrid_config(1 << 20, 1);
  c.layers[0] = KvLayerSpec{1, 16, 0, 100};  // K/V and a state
  EXPECT_THROW(KvCache{c}, Error);
  c.layers = {KvLayerSpec{0, 0, 0, 10}, KvLayerSpec{0, 0, 0, 10}};  // no attention layer at all
  EXPECT_THROW(KvCache{c}, Error);
}

}  // namespace
}  // namespace ridge
