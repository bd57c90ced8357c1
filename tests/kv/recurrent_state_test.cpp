// The KV cache's second kind of storage: a hybrid model's recurrent layers keep a fixed-size
// state per sequence slot instead of K/V rows (kv/kv_cache.h, "Recurrent state").
#include <gtest/gtest.h>

#include <cstdint>
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

TEST(RecurrentState, ASequenceCannotBeCutBackAndPrefixCachingIsOff) {
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

TEST(RecurrentState, ConfigurationsThatMakeNoSenseAreRefused) {
  KvCacheConfig c = hybrid_config(1 << 20, 1);
  c.layers[0] = KvLayerSpec{1, 16, 0, 100};  // K/V and a state
  EXPECT_THROW(KvCache{c}, Error);
  c.layers = {KvLayerSpec{0, 0, 0, 10}, KvLayerSpec{0, 0, 0, 10}};  // no attention layer at all
  EXPECT_THROW(KvCache{c}, Error);
}

}  // namespace
}  // namespace ridge
