// Prefix caching, model-free: the hash chain, the block index, and the KV cache's reuse of
// full blocks with exact block ids, refcounts and LRU eviction order.
#include "kv/prefix_cache.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"

namespace ridge {
namespace {

constexpr int32_t kBlock = 4;
constexpr size_t kBlockBytes = 512;  // one layer, 1 KV head of 16 floats, 4-token blocks

std::vector<int32_t> iota_tokens(int32_t n, int32_t first = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<int32_t> table(const KvCache& cache, int32_t seq, int g = 0) {
  std::span<const int32_t> t = cache.block_table(seq, g);
  return {t.begin(), t.end()};
}

// One global layer; n_blocks blocks of 4 tokens.
KvCacheConfig global_config(int32_t n_blocks, int32_t max_sequences = 4) {
  KvCacheConfig c;
  c.layers = {KvLayerSpec{1, 16, 0}};
  c.block_size = kBlock;
  c.budget_bytes = static_cast<size_t>(n_blocks) * kBlockBytes;
  c.max_sequences = max_sequences;
  c.max_context = 64;
  c.max_step_tokens = 64;
  c.prefix_cache = true;
  return c;
}

// Adds seq, computes all of tokens in one step (as the model would), commits them.
void compute(KvCache& cache, int32_t seq, const std::vector<int32_t>& tokens) {
  cache.add_sequence(seq);
  cache.set_tokens(seq, tokens);
  ASSERT_TRUE(cache.reserve(seq, static_cast<int32_t>(tokens.size())));
  cache.commit(seq, static_cast<int32_t>(tokens.size()));
  cache.recycle_window(seq);
}

// Adds seq, attaches the cached prefix of tokens, then computes the rest.
int32_t compute_with_prefix(KvCache& cache, int32_t seq, const std::vector<int32_t>& tokens) {
  cache.add_sequence(seq);
  const int32_t cached = cache.attach_prefix(seq, tokens);
  const int32_t rest = static_cast<int32_t>(tokens.size()) - cached;
  EXPECT_TRUE(cache.reserve(seq, rest));
  cache.commit(seq, rest);
  cache.recycle_window(seq);
  return cached;
}

TEST(BlockPoolTake, RemovesABlockFromTheMiddleOfTheFreeQueue) {
  BlockPool pool(5);
  for (int i = 0; i < 5; ++i) pool.allocate();
  for (int32_t b : {3, 0, 4, 1}) pool.release(b);  // queue: 3 0 4 1
  EXPECT_EQ(pool.next_free(), 3);
  pool.take(4);  // a prefix-cache hit on block 4
  EXPECT_EQ(pool.ref_count(4), 1);
  EXPECT_EQ(pool.n_free(), 3);
  pool.take(3);  // the head
  EXPECT_EQ(pool.next_free(), 0);
  pool.release(4);  // back to the tail: queue 0 1 4
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.allocate(), 1);
  EXPECT_EQ(pool.allocate(), 4);
  EXPECT_EQ(pool.allocate(), BlockPool::kNoBlock);
  EXPECT_EQ(pool.next_free(), BlockPool::kNoBlock);
  EXPECT_THROW(pool.take(2), Error);  // in use
  EXPECT_THROW(pool.take(5), Error);  // unknown
}

TEST(BlockHash, ChainNamesTheWholePrefix) {
  const std::vector<int32_t> a = iota_tokens(12);
  std::vector<BlockHash> ha;
  extend_block_hashes(a, kBlock, ha);
  ASSERT_EQ(ha.size(), 3u);
  EXPECT_EQ(ha[0], hash_block(kRootHash, std::span(a).subspan(0, 4)));
  EXPECT_EQ(ha[1], hash_block(ha[0], std::span(a).subspan(4, 4)));
  EXPECT_EQ(ha[2], hash_block(ha[1], std::span(a).subspan(8, 4)));
  // Same tokens in block 1, different block 0: every later hash differs.
  std::vector<int32_t> b = a;
  b[0] = 7;
  std::vector<BlockHash> hb;
  extend_block_hashes(b, kBlock, hb);
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(ha[i], hb[i]) << i;
  // Block order matters: swapping two blocks' contents changes the chain.
  std::vector<int32_t> c(a.begin() + 4, a.begin() + 8);
  c.insert(c.end(), a.begin(), a.begin() + 4);
  std::vector<BlockHash> hc;
  extend_block_hashes(c, kBlock, hc);
  EXPECT_NE(hc[1], ha[1]);
}

TEST(BlockHash, ExtendsIncrementallyAndSkipsThePartialBlock) {
  const std::vector<int32_t> t = iota_tokens(14);
  std::vector<BlockHash> all;
  extend_block_hashes(t, kBlock, all);
  EXPECT_EQ(all.size(), 3u);  // 14 tokens: 3 full blocks, 2 tokens left over
  std::vector<BlockHash> step;
  for (size_t n = 0; n <= t.size(); ++n) extend_block_hashes(std::span(t).first(n), kBlock, step);
  EXPECT_EQ(step, all);
}

TEST(PrefixCacheIndex, FindsInsertedBlocksAndMissesOthers) {
  PrefixCache index(8, kBlock);
  const std::vector<int32_t> t = iota_tokens(4);
  const BlockHash h = hash_block(kRootHash, t);
  EXPECT_EQ(index.find(h, kRootHash, t), PrefixCache::kNoBlock);
  EXPECT_TRUE(index.insert(5, h, kRootHash, t));
  EXPECT_EQ(index.find(h, kRootHash, t), 5);
  EXPECT_TRUE(index.holds(5));
  EXPECT_EQ(index.size(), 1);
  // Another block with the same content is not indexed a second time.
  EXPECT_FALSE(index.insert(6, h, kRootHash, t));
  EXPECT_FALSE(index.holds(6));
  // A lookup whose hash matches but whose tokens or parent differ (a collision) misses.
  std::vector<int32_t> other = t;
  other[3] = 1;
  EXPECT_EQ(index.find(h, kRootHash, other), PrefixCache::kNoBlock);
  EXPECT_EQ(index.find(h, kRootHash + 1, t), PrefixCache::kNoBlock);
  index.erase(5);
  EXPECT_EQ(index.find(h, kRootHash, t), PrefixCache::kNoBlock);
  EXPECT_EQ(index.size(), 0);
  EXPECT_THROW(index.insert(8, h, kRootHash, t), Error);
  EXPECT_THROW(index.insert(0, h, kRootHash, std::span(t).first(3)), Error);
}

// Random inserts and erases against std::map, with hashes forced into few home slots so
// that probe runs wrap and backward-shift deletion is exercised.
TEST(PrefixCacheIndex, AgreesWithAMapUnderChurn) {
  constexpr int32_t kBlocks = 32;
  PrefixCache index(kBlocks, kBlock);
  std::map<BlockHash, int32_t> expected;
  std::vector<BlockHash> held(kBlocks, 0);
  std::vector<bool> used(kBlocks, false);
  const std::vector<int32_t> t = iota_tokens(4);
  std::mt19937 rng(3);
  for (int iter = 0; iter < 20000; ++iter) {
    const auto block = static_cast<int32_t>(rng() % kBlocks);
    if (used[static_cast<size_t>(block)]) {
      index.erase(block);
      expected.erase(held[static_cast<size_t>(block)]);
      used[static_cast<size_t>(block)] = false;
    } else {
      // Few distinct low bits (home slots 0..3 and 60..63 of 64), distinct high bits.
      const BlockHash h = (BlockHash{rng() % 1000} << 32) | ((rng() % 8) + 60) % 64;
      const bool inserted = index.insert(block, h, kRootHash, t);
      EXPECT_EQ(inserted, !expected.contains(h));
      if (inserted) {
        expected[h] = block;
        held[static_cast<size_t>(block)] = h;
        used[static_cast<size_t>(block)] = true;
      }
    }
    if (iter % 97 == 0) {
      for (const auto& [h, b] : expected) ASSERT_EQ(index.find(h, kRootHash, t), b);
      ASSERT_EQ(index.size(), static_cast<int32_t>(expected.size()));
    }
  }
}

TEST(PrefixCaching, SecondSequenceReusesFullBlocksOnly) {
  KvCache cache(global_config(8));
  const std::vector<int32_t> prompt = iota_tokens(10);  // blocks [0..3] [4..7] full, [8, 9]
  compute(cache, 0, prompt);
  EXPECT_EQ(table(cache, 0), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_TRUE(cache.block_is_cached(0, 0));
  EXPECT_TRUE(cache.block_is_cached(0, 1));
  EXPECT_FALSE(cache.block_is_cached(0, 2));  // partial: never shared

  cache.add_sequence(1);
  EXPECT_EQ(cache.attach_prefix(1, prompt), 8);
  EXPECT_EQ(cache.n_tokens(1), 8);
  EXPECT_EQ(table(cache, 1), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(cache.pool(0).ref_count(0), 2);
  EXPECT_EQ(cache.pool(0).ref_count(1), 2);
  // The first new token starts a fresh block.
  ASSERT_TRUE(cache.reserve(1, 2));
  EXPECT_EQ(table(cache, 1), (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(cache.slot(1, 0, 8).block, 3);
  EXPECT_EQ(cache.slot(1, 0, 8).offset, 0);
}

TEST(PrefixCaching, MissesOnADifferentBlockAndAlwaysLeavesOneTokenToCompute) {
  KvCache cache(global_config(8));
  compute(cache, 0, iota_tokens(8));  // two full blocks
  std::vector<int32_t> diverging = iota_tokens(12);
  diverging[5] = 1;  // second block differs
  cache.add_sequence(1);
  EXPECT_EQ(cache.attach_prefix(1, diverging), 4);
  EXPECT_EQ(table(cache, 1), (std::vector<int32_t>{0}));
  // Exactly the cached prompt: the last block is recomputed so its last token gets logits.
  cache.add_sequence(2);
  EXPECT_EQ(cache.attach_prefix(2, iota_tokens(8)), 4);
  // A different first token: nothing.
  cache.add_sequence(3);
  EXPECT_EQ(cache.attach_prefix(3, iota_tokens(12, 101)), 0);
  EXPECT_EQ(cache.capacity(3), 0);
}

TEST(PrefixCaching, FreedBlocksStayCachedUntilEvictedLeastRecentlyFreedFirst) {
  KvCache cache(global_config(8));
  compute(cache, 0, iota_tokens(12));  // blocks 0, 1, 2, all full and indexed
  cache.free_sequence(0);              // released tail first: 2, 1, 0
  EXPECT_EQ(cache.n_free_blocks(0), 8);
  EXPECT_EQ(cache.n_cached_blocks(0), 3);
  // Free queue: 3 4 5 6 7 (never used) then 2 1 0. Blocks never cached go first.
  cache.add_sequence(1);
  ASSERT_TRUE(cache.reserve(1, 20));
  cache.commit(1, 20);
  EXPECT_EQ(table(cache, 1), (std::vector<int32_t>{3, 4, 5, 6, 7}));
  EXPECT_EQ(cache.n_cached_blocks(0), 3);
  // Now the pool must evict: the tail block (2) goes first, then 1.
  ASSERT_TRUE(cache.reserve(1, 4));
  EXPECT_EQ(table(cache, 1).back(), 2);
  EXPECT_FALSE(cache.block_is_cached(0, 2));
  EXPECT_EQ(cache.n_cached_blocks(0), 2);
  // The surviving head still serves the prefix: blocks 0 and 1 (not 2).
  cache.add_sequence(2);
  EXPECT_EQ(cache.attach_prefix(2, iota_tokens(13)), 8);
  EXPECT_EQ(table(cache, 2), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(cache.n_cached_blocks(0), 0);  // taken back out of the free queue
  EXPECT_EQ(cache.n_free_blocks(0), 0);
}

TEST(PrefixCaching, ReuseRefreshesABlocksPlaceInTheEvictionOrder) {
  KvCache cache(global_config(4));
  compute(cache, 0, iota_tokens(4));        // block 0: prompt A
  compute(cache, 1, iota_tokens(4, 200));   // block 1: prompt B
  cache.free_sequence(0);                   // queue: 2 3 0
  cache.free_sequence(1);                   // queue: 2 3 0 1
  // Reusing A's block (then freeing it) moves it behind B's.
  cache.add_sequence(2);
  EXPECT_EQ(cache.attach_prefix(2, iota_tokens(5)), 4);
  cache.free_sequence(2);                   // queue: 2 3 1 0
  cache.add_sequence(3);
  ASSERT_TRUE(cache.reserve(3, 12));
  EXPECT_EQ(table(cache, 3), (std::vector<int32_t>{2, 3, 1}));
  EXPECT_TRUE(cache.block_is_cached(0, 0));   // A survives
  EXPECT_FALSE(cache.block_is_cached(0, 1));  // B was evicted
}

TEST(PrefixCaching, PrefixSharedByLiveSequencesIsNeverEvictedOrWritten) {
  KvCache cache(global_config(8));
  const std::vector<int32_t> prompt = iota_tokens(9);
  compute(cache, 0, prompt);  // blocks 0 1 full, 2 partial
  EXPECT_EQ(compute_with_prefix(cache, 1, prompt), 8);
  EXPECT_EQ(compute_with_prefix(cache, 2, prompt), 8);
  EXPECT_EQ(table(cache, 0), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(table(cache, 1), (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(table(cache, 2), (std::vector<int32_t>{0, 1, 4}));
  EXPECT_EQ(cache.pool(0).ref_count(0), 3);
  EXPECT_EQ(cache.pool(0).ref_count(1), 3);
  // A fourth sequence takes every free block; the shared ones are not candidates.
  cache.add_sequence(3);
  ASSERT_TRUE(cache.reserve(3, 12));
  cache.commit(3, 12);
  EXPECT_EQ(table(cache, 3), (std::vector<int32_t>{5, 6, 7}));
  EXPECT_FALSE(cache.reserve(3, 4));  // full: fails rather than take a referenced block
  EXPECT_TRUE(cache.block_is_cached(0, 0));
  EXPECT_TRUE(cache.block_is_cached(0, 1));
  // Owners leave one by one; the blocks stay used until the last one goes.
  cache.free_sequence(0);
  cache.free_sequence(1);
  EXPECT_EQ(cache.pool(0).ref_count(0), 1);
  EXPECT_EQ(cache.n_cached_blocks(0), 0);
  cache.free_sequence(2);
  EXPECT_EQ(cache.pool(0).ref_count(0), 0);
  EXPECT_EQ(cache.n_cached_blocks(0), 2);
  EXPECT_EQ(cache.n_free_blocks(0), 5);  // 0 1 cached, 2 3 4 plain free
}

TEST(PrefixCaching, GeneratedTokensFillBlocksThatAreIndexedToo) {
  KvCache cache(global_config(8));
  std::vector<int32_t> tokens = iota_tokens(3);
  cache.add_sequence(0);
  cache.set_tokens(0, tokens);
  ASSERT_TRUE(cache.reserve(0, 3));
  cache.commit(0, 3);
  for (int32_t t = 0; t < 6; ++t) {  // decode: one token per step
    tokens.push_back(500 + t);
    cache.set_tokens(0, tokens);
    ASSERT_TRUE(cache.reserve(0, 1));
    cache.commit(0, 1);
  }
  EXPECT_TRUE(cache.block_is_cached(0, 0));
  EXPECT_TRUE(cache.block_is_cached(0, 1));  // tokens 4..7 full once the 8th was committed
  tokens.push_back(1);
  cache.add_sequence(1);
  EXPECT_EQ(cache.attach_prefix(1, tokens), 8);
}

TEST(PrefixCaching, RejectedDraftTokensAreNeverIndexed) {
  // Speculative decoding tells the cache only confirmed tokens: drafts are computed and
  // committed but their ids are not given to set_tokens, so a block they fill is not
  // indexed; after the rollback the accepted token fills it and it is indexed as it is.
  KvCache cache(global_config(8));
  std::vector<int32_t> tokens = iota_tokens(6);  // confirmed: 0..5 (5 is the last sampled)
  cache.add_sequence(0);
  cache.set_tokens(0, tokens);
  ASSERT_TRUE(cache.reserve(0, 5));
  cache.commit(0, 5);
  // Verify step: token 5 + drafts 900, 901, 902 (positions 5..8; block 1 = 4..7 fills).
  ASSERT_TRUE(cache.reserve(0, 4));
  cache.commit(0, 4);
  EXPECT_TRUE(cache.block_is_cached(0, 0));
  EXPECT_FALSE(cache.block_is_cached(0, 1));
  cache.truncate(0, 7);  // 900 accepted; 901, 902 rejected; 42 is the correction
  EXPECT_EQ(cache.n_used_blocks(0), 2);
  tokens.insert(tokens.end(), {900, 42});
  cache.set_tokens(0, tokens);  // next step: 42 is computed at position 7
  ASSERT_TRUE(cache.reserve(0, 1));
  cache.commit(0, 1);
  EXPECT_TRUE(cache.block_is_cached(0, 1));
  tokens.push_back(7);
  cache.add_sequence(1);
  EXPECT_EQ(cache.attach_prefix(1, tokens), 8);
  // A drafted prefix (902 in place of 42) finds only the first block.
  std::vector<int32_t> drafted = iota_tokens(6);
  drafted.insert(drafted.end(), {900, 901, 902});
  cache.add_sequence(2);
  EXPECT_EQ(cache.attach_prefix(2, drafted), 4);
  // Truncating into indexed blocks is refused: they may be shared.
  EXPECT_THROW(cache.truncate(0, 7), Error);
}

TEST(PrefixCaching, OffByDefaultAndMisuseThrows) {
  KvCacheConfig config = global_config(8);
  config.prefix_cache = false;
  KvCache plain(config);
  compute(plain, 0, iota_tokens(8));
  EXPECT_FALSE(plain.block_is_cached(0, 0));
  plain.add_sequence(1);
  EXPECT_EQ(plain.attach_prefix(1, iota_tokens(9)), 0);

  KvCache cache(global_config(8));
  compute(cache, 0, iota_tokens(8));
  EXPECT_THROW(cache.attach_prefix(0, iota_tokens(9)), Error);  // already holds tokens
  EXPECT_THROW(cache.set_tokens(0, iota_tokens(4)), Error);     // shorter than before
  EXPECT_THROW(cache.set_tokens(0, iota_tokens(65)), Error);    // past max_context
}

// A global layer and a layer with a 6-token window; windowed blocks of the 20-token prompt
// before position 15 are recycled (released, still cached) when it is computed.
KvCacheConfig windowed_config() {
  KvCacheConfig c;
  c.layers = {KvLayerSpec{1, 16, 0}, KvLayerSpec{1, 16, 6}};
  c.block_size = kBlock;
  c.max_sequences = 2;
  c.max_context = 64;
  c.max_step_tokens = 20;  // windowed pool: 2 x (ceil((6 + 20 - 2) / 4) + 1) = 14 blocks
  c.budget_bytes = (14 + 16) * kBlockBytes;  // global pool: 16 blocks
  c.prefix_cache = true;
  return c;
}

TEST(PrefixCaching, WindowedGroupReusesOnlyTheBlocksInsideTheWindow) {
  KvCache cache(windowed_config());
  ASSERT_EQ(cache.group(1).window, 6);
  ASSERT_EQ(cache.group(1).n_blocks, 14);
  const std::vector<int32_t> prompt = iota_tokens(20);
  compute(cache, 0, prompt);
  EXPECT_EQ(table(cache, 0, 1), (std::vector<int32_t>{-1, -1, -1, 3, 4}));
  EXPECT_EQ(cache.n_cached_blocks(1), 3);  // windowed 0 1 2: recycled but indexed

  // Resuming at 20: the window needs positions 15..19, logical blocks 3 and 4.
  std::vector<int32_t> longer = prompt;
  longer.push_back(7);
  cache.add_sequence(1);
  EXPECT_EQ(cache.attach_prefix(1, longer), 20);
  EXPECT_EQ(table(cache, 1, 0), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(table(cache, 1, 1), (std::vector<int32_t>{-1, -1, -1, 3, 4}));
  EXPECT_EQ(cache.pool(1).ref_count(3), 2);
  cache.free_sequence(1);

  // Resuming at 12 (the prompt diverges in block 3): the window needs positions 7..11,
  // logical blocks 1 and 2, which only the free queue still holds.
  std::vector<int32_t> diverging(prompt.begin(), prompt.begin() + 12);
  for (int32_t i = 0; i < 5; ++i) diverging.push_back(900 + i);
  cache.add_sequence(1);
  EXPECT_EQ(cache.attach_prefix(1, diverging), 12);
  EXPECT_EQ(table(cache, 1, 1), (std::vector<int32_t>{-1, 1, 2}));
  EXPECT_EQ(cache.pool(1).ref_count(1), 1);
  EXPECT_EQ(cache.n_cached_blocks(1), 1);  // windowed block 0 is still cached free
}

TEST(PrefixCaching, WindowedGroupShortensThePrefixWhenItsBlocksWereEvicted) {
  for (const int32_t evict_tokens : {40, 44}) {
    SCOPED_TRACE(evict_tokens);
    KvCache cache(windowed_config());
    const std::vector<int32_t> prompt = iota_tokens(20);
    compute(cache, 0, prompt);  // windowed queue: 5..13 never used, then 0 1 2 recycled
    // Another sequence takes 10 (11) windowed blocks: evicts windowed block 0 (and 1).
    cache.add_sequence(1);
    ASSERT_TRUE(cache.reserve(1, evict_tokens));
    EXPECT_FALSE(cache.block_is_cached(1, 0));
    EXPECT_EQ(cache.block_is_cached(1, 1), evict_tokens == 40);
    cache.free_sequence(1);
    std::vector<int32_t> diverging(prompt.begin(), prompt.begin() + 12);
    for (int32_t i = 0; i < 5; ++i) diverging.push_back(900 + i);
    cache.add_sequence(1);
    // The global group holds 3 blocks of the prefix either way; the window at 12 needs
    // logical blocks 1 and 2, at 8 blocks 0 and 1, at 4 block 0.
    EXPECT_EQ(cache.attach_prefix(1, diverging), evict_tokens == 40 ? 12 : 0);
  }
}

}  // namespace
}  // namespace ridge
