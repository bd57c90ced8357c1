#include "kv/kv_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"

#include "../allocation_counter.h"

namespace ridge {
namespace {

// A small layer: a token costs 2 * 1 * 16 * 4 = 128 bytes of K and V, a 4-token block 512
// bytes (a multiple of 64, so pools need no padding and budgets divide exactly).
constexpr KvLayerSpec kTiny{1, 16, 0};
constexpr size_t kBlockBytes = 512;

KvLayerSpec tiny(int32_t window) { return KvLayerSpec{kTiny.n_kv_head, kTiny.d_head, window}; }

KvCacheConfig small_config(std::vector<KvLayerSpec> layers, size_t budget, int32_t max_sequences,
                           int32_t max_context, int32_t max_step_tokens) {
  KvCacheConfig c;
  c.layers = std::move(layers);
  c.block_size = 4;
  c.budget_bytes = budget;
  c.max_sequences = max_sequences;
  c.max_context = max_context;
  c.max_step_tokens = max_step_tokens;
  return c;
}

std::vector<int32_t> table(const KvCache& cache, int32_t seq, int g) {
  std::span<const int32_t> t = cache.block_table(seq, g);
  return {t.begin(), t.end()};
}

std::string error_of(const KvCacheConfig& config) {
  try {
    KvCache cache(config);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// Gemma 3 270M: 18 layers, every sixth global, the rest sliding window 512; 1 KV head of 256.
KvCacheConfig gemma3_270m_like(size_t budget) {
  KvCacheConfig c;
  for (int il = 0; il < 18; ++il) c.layers.push_back({1, 256, il % 6 == 5 ? 0 : 512});
  c.budget_bytes = budget;
  c.max_sequences = 2;
  c.max_context = 65536;
  c.max_step_tokens = 512;
  return c;
}

TEST(KvCache, BytesPerTokenOfAGemma3_270mLikeModel) {
  KvCacheConfig config = gemma3_270m_like(size_t{256} << 20);
  KvCache cache(config);
  // 2 (K and V) * 18 layers * 1 KV head * 256 * 4 bytes = 36 KiB, windows or not.
  EXPECT_EQ(cache.bytes_per_token(), 2u * 18 * 1 * 256 * 4);
  EXPECT_EQ(cache.bytes_per_token(), 36u * 1024);

  ASSERT_EQ(cache.n_groups(), 2);
  EXPECT_EQ(cache.group(0).window, 0);
  EXPECT_EQ(cache.group(0).layers, (std::vector<int32_t>{5, 11, 17}));
  EXPECT_EQ(cache.group(1).window, 512);
  EXPECT_EQ(cache.group(1).layers.size(), 15u);
  EXPECT_EQ(cache.group_of_layer(4), 1);
  EXPECT_EQ(cache.group_of_layer(5), 0);
  EXPECT_EQ(cache.group(0).bytes_per_block, 16u * 3 * 2048);
  EXPECT_EQ(cache.group(1).bytes_per_block, 16u * 15 * 2048);

  // The windowed group gets 2 sequences x (ceil((512 + 512 - 2) / 16) + 1 = 65) blocks;
  // the global group the rest: (256 MiB - 130 * 491520) / 98304 = 2080 blocks.
  EXPECT_EQ(kv_window_blocks(512, 512, 16, 65536), 65);
  EXPECT_EQ(cache.group(1).n_blocks, 130);
  EXPECT_EQ(cache.group(0).n_blocks, 2080);
  EXPECT_EQ(cache.total_bytes(), 2080u * 98304 + 130u * 491520);
  EXPECT_LE(cache.total_bytes(), config.budget_bytes);
  EXPECT_EQ(cache.max_tokens_per_sequence(), 2080 * 16);  // the global pool is the limit
  EXPECT_EQ(cache.summary(),
            "kv cache: blocks (global: 2080, window 512: 130) x 16 tokens, 36.0 KiB/token, "
            "255.9 MiB total (f32)");

  config.dtype = DType::F16;
  KvCache half(config);
  EXPECT_EQ(half.bytes_per_token(), 18u * 1024);
}

TEST(KvCache, BytesPerTokenOfEachElementType) {
  // Qwen2.5-coder-0.5B's shape: 24 layers x 2 KV heads x 64, one global group.
  KvCacheConfig config;
  config.layers = uniform_kv_layers(24, 2, 64);
  config.max_sequences = 4;
  config.budget_bytes = size_t{48} << 20;
  const size_t values_per_token = 2u * 24 * 2 * 64;
  EXPECT_EQ(std::vector<DType>(std::begin(kKvDtypes), std::end(kKvDtypes)),
            (std::vector<DType>{DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}));
  EXPECT_EQ(kv_dtype_names(), "f32, f16, bf16, q8_0 or q4_0");
  // Bytes per value: 4, 2, 2, and GGML's blocks of 32 values: 34 (Q8_0) and 18 (Q4_0).
  const std::pair<DType, size_t> per_token_of[] = {{DType::F32, values_per_token * 4},
                                                   {DType::F16, values_per_token * 2},
                                                   {DType::BF16, values_per_token * 2},
                                                   {DType::Q8_0, values_per_token / 32 * 34},
                                                   {DType::Q4_0, values_per_token / 32 * 18}};
  for (const auto& [dtype, per_token] : per_token_of) {
    SCOPED_TRACE(dtype_name(dtype));
    config.dtype = dtype;
    EXPECT_EQ(kv_bytes_per_token(config), per_token);
    EXPECT_EQ(plan_kv_cache(config).bytes_per_token, per_token);
    KvCache cache(config);
    EXPECT_EQ(cache.dtype(), dtype);
    EXPECT_EQ(cache.bytes_per_token(), per_token);
    EXPECT_EQ(cache.layer(0).row_bytes, per_token / 24 / 2);  // one K (or V) row of a layer
    EXPECT_EQ(cache.layer(0).dtype, dtype);
    // The same budget holds blocks in inverse proportion to the bytes per token, less the
    // pools' 64-byte padding; the plan says so before anything is allocated.
    const auto blocks = static_cast<int32_t>(config.budget_bytes / (16 * per_token));
    EXPECT_LE(cache.group(0).n_blocks, blocks);
    EXPECT_GE(cache.group(0).n_blocks, blocks - 1);
    EXPECT_EQ(plan_kv_cache(config).tokens_held(16), int64_t{cache.group(0).n_blocks} * 16);
    EXPECT_EQ(plan_kv_cache(config).total_bytes, cache.total_bytes());
    EXPECT_EQ(static_cast<char*>(cache.k_row(0, 1, 0)) - static_cast<char*>(cache.k_row(0, 0, 0)),
              static_cast<std::ptrdiff_t>(16 * per_token / 48));
  }
  config.dtype = DType::F16;
  EXPECT_EQ(KvCache(config).summary(), "kv cache: 256 blocks x 16 tokens, 12.0 KiB/token, 48.0 MiB total (f16)");
  EXPECT_TRUE(is_kv_dtype(DType::Q4_0));
  EXPECT_FALSE(is_kv_dtype(DType::Q4_K));
}

TEST(KvCache, QuantizedTypesNeedHeadsThatSplitIntoBlocks) {
  KvCacheConfig config;
  config.layers = uniform_kv_layers(2, 4, 8);  // stories260K's heads of 8 values
  config.budget_bytes = size_t{1} << 20;
  config.dtype = DType::Q8_0;
  try {
    KvCache cache(config);
    ADD_FAILURE() << "a q8_0 cache with 8-value heads was built";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "kv cache: layer 0: head size 8 is not a multiple of q8_0's block of 32 values; "
                           "use f16 or bf16");
  }
  config.dtype = DType::BF16;
  EXPECT_EQ(KvCache(config).bytes_per_token(), 2u * 2 * 4 * 8 * 2);
}

TEST(KvCache, BytesPerTokenAndSummaryOfAQwen2_5_1_5bLikeModel) {
  KvCacheConfig config;
  config.layers = uniform_kv_layers(28, 2, 128);
  config.max_sequences = 16;
  // 2 * 28 layers * 2 KV heads * 128 * 4 bytes = 56 KiB per token; 64 blocks of 16.
  config.budget_bytes = 64u * 16 * 57344;
  KvCache cache(config);
  EXPECT_EQ(cache.bytes_per_token(), 57344u);
  EXPECT_EQ(cache.n_groups(), 1);
  EXPECT_EQ(cache.group(0).n_blocks, 64);
  EXPECT_EQ(cache.total_bytes(), config.budget_bytes);
  EXPECT_EQ(cache.summary(),
            "kv cache: 64 blocks x 16 tokens, 56.0 KiB/token, 56.0 MiB total (f32)");

  // One byte less no longer holds the 64th block.
  config.budget_bytes -= 1;
  EXPECT_EQ(KvCache(config).group(0).n_blocks, 63);
}

TEST(KvCache, GlobalPoolNeverExceedsWhatAllSequencesCanUse) {
  // 2 sequences x ceil(10 / 4) blocks = 6 blocks, however large the budget.
  KvCache cache(small_config({tiny(0)}, 1 << 20, 2, 10, 4));
  EXPECT_EQ(cache.group(0).n_blocks, 6);
  EXPECT_EQ(cache.total_bytes(), 6 * kBlockBytes);
}

TEST(KvCache, BadConfigurationsNameTheProblem) {
  const KvCacheConfig good = small_config({tiny(0), tiny(8)}, 64 * kBlockBytes, 1, 64, 4);
  EXPECT_NO_THROW(KvCache{good});

  KvCacheConfig c = good;
  c.layers.clear();
  EXPECT_NE(error_of(c).find("no layers"), std::string::npos) << error_of(c);
  c = good;
  c.layers[1].window = -8;
  EXPECT_NE(error_of(c).find("layer 1: window must be positive"), std::string::npos) << error_of(c);
  c = good;
  c.layers[0].n_kv_head = 0;
  EXPECT_NE(error_of(c).find("layer 0: n_kv_head"), std::string::npos) << error_of(c);
  c = good;
  c.layers[1].d_head = -1;
  EXPECT_NE(error_of(c).find("layer 1: d_head"), std::string::npos) << error_of(c);
  c = good;
  c.block_size = 0;
  EXPECT_NE(error_of(c).find("block_size"), std::string::npos) << error_of(c);
  c = good;
  c.dtype = DType::Q4_K;
  EXPECT_NE(error_of(c).find("q4_K is not supported"), std::string::npos) << error_of(c);
  c = good;
  c.max_sequences = 0;
  EXPECT_NE(error_of(c).find("max_sequences"), std::string::npos) << error_of(c);
  c = good;
  c.max_context = 0;
  EXPECT_NE(error_of(c).find("max_context"), std::string::npos) << error_of(c);
  c = good;
  c.max_step_tokens = 0;
  EXPECT_NE(error_of(c).find("max_step_tokens"), std::string::npos) << error_of(c);

  // Global only: one block is 512 bytes.
  c = small_config({tiny(0)}, kBlockBytes - 1, 1, 64, 4);
  EXPECT_NE(error_of(c).find("too small"), std::string::npos) << error_of(c);
  c.budget_bytes = kBlockBytes;
  EXPECT_EQ(KvCache(c).group(0).n_blocks, 1);
  // Hybrid: the window group needs 4 blocks (2048 bytes) before the global group gets one.
  c = small_config({tiny(0), tiny(8)}, 4 * kBlockBytes + kBlockBytes - 1, 1, 64, 4);
  EXPECT_NE(error_of(c).find("sliding-window layers need 2048 bytes"), std::string::npos)
      << error_of(c);
  // All windowed: too small for one block.
  c = small_config({tiny(8)}, kBlockBytes - 1, 1, 64, 4);
  EXPECT_NE(error_of(c).find("too small for one block"), std::string::npos) << error_of(c);
}

// Two global layers: 8 blocks.
TEST(KvCache, SequencesTakeBlocksInOrderAndGiveThemBack) {
  KvCache cache(small_config({tiny(0), tiny(0)}, 8 * 2 * kBlockBytes, 4, 64, 16));
  ASSERT_EQ(cache.group(0).n_blocks, 8);
  cache.add_sequence(0);
  cache.add_sequence(1);
  ASSERT_TRUE(cache.reserve(0, 5));
  EXPECT_EQ(table(cache, 0, 0), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(cache.capacity(0), 8);
  EXPECT_EQ(cache.n_tokens(0), 0);
  ASSERT_TRUE(cache.reserve(1, 3));
  EXPECT_EQ(table(cache, 1, 0), (std::vector<int32_t>{2}));
  cache.commit(0, 5);
  EXPECT_EQ(cache.n_tokens(0), 5);
  ASSERT_TRUE(cache.reserve(0, 3));  // 8 tokens fit in the 2 blocks it has
  EXPECT_EQ(table(cache, 0, 0), (std::vector<int32_t>{0, 1}));
  ASSERT_TRUE(cache.reserve(0, 4));  // 9 tokens need a third block
  EXPECT_EQ(table(cache, 0, 0), (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(cache.n_free_blocks(0), 4);

  // Slot of position 9 of sequence 0: logical block 2 = block 3, offset 1.
  const KvSlot s = cache.slot(0, 0, 9);
  EXPECT_EQ(s.block, 3);
  EXPECT_EQ(s.offset, 1);

  // 21 tokens need 6 blocks, 5 more than sequence 1 has; only 4 are free: refused, and
  // nothing changed.
  EXPECT_FALSE(cache.can_reserve(1, 21));
  EXPECT_FALSE(cache.reserve(1, 21));
  EXPECT_EQ(table(cache, 1, 0), (std::vector<int32_t>{2}));
  EXPECT_EQ(cache.capacity(1), 4);
  EXPECT_EQ(cache.n_free_blocks(0), 4);

  // Freeing sequence 0 returns 3, 1, 0 (last block first) behind the never-used 4..7.
  cache.free_sequence(0);
  EXPECT_FALSE(cache.has_sequence(0));
  EXPECT_EQ(cache.n_free_blocks(0), 7);
  ASSERT_TRUE(cache.reserve(1, 20));
  EXPECT_EQ(table(cache, 1, 0), (std::vector<int32_t>{2, 4, 5, 6, 7}));
  cache.add_sequence(0);
  EXPECT_EQ(cache.n_tokens(0), 0);
  ASSERT_TRUE(cache.reserve(0, 8));
  EXPECT_EQ(table(cache, 0, 0), (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(cache.n_free_blocks(0), 1);
  EXPECT_EQ(cache.pool(0).ref_count(3), 1);
}

// A global layer and a window-8 layer. With one sequence and steps of
// up to 4 tokens the window group needs ceil((8 + 4 - 2) / 4) + 1 = 4 blocks.
KvCacheConfig hybrid_config(int32_t max_step_tokens, int32_t window_blocks, int32_t global_blocks) {
  return small_config({tiny(0), tiny(8)}, size_t(window_blocks + global_blocks) * kBlockBytes,
                      1, 64, max_step_tokens);
}

TEST(KvCache, ReserveIsAllOrNothingAcrossGroups) {
  KvCache cache(hybrid_config(4, 4, 16));
  ASSERT_EQ(cache.group(1).n_blocks, 4);
  ASSERT_EQ(cache.group(0).n_blocks, 16);
  // 20 tokens need 5 blocks in each group: the global group has them, the window group not.
  EXPECT_FALSE(cache.can_fit(20));
  EXPECT_TRUE(cache.can_fit(16));
  cache.add_sequence(0);
  EXPECT_FALSE(cache.reserve(0, 20));
  EXPECT_EQ(cache.n_free_blocks(0), 16);
  EXPECT_EQ(cache.n_free_blocks(1), 4);
  EXPECT_EQ(cache.capacity(0), 0);
  EXPECT_TRUE(cache.reserve(0, 16));
  EXPECT_EQ(table(cache, 0, 0), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(table(cache, 0, 1), (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(KvCache, DecodingRecyclesBlocksThatLeftTheWindow) {
  KvCache cache(hybrid_config(4, 4, 16));
  cache.add_sequence(0);
  ASSERT_TRUE(cache.reserve(0, 4));
  cache.commit(0, 4);
  EXPECT_EQ(cache.recycle_window(0), 0);
  // With window 8 the next query (position n) reads keys n - 7 .. n, so logical block b
  // (positions 4b .. 4b + 3) goes once n - 7 >= 4b + 4, i.e. when n reaches 4b + 11.
  for (int32_t n = 5; n <= 64; ++n) {
    ASSERT_TRUE(cache.reserve(0, 1)) << "n " << n;
    cache.commit(0, 1);
    const int32_t freed = cache.recycle_window(0);
    EXPECT_EQ(freed, (n >= 11 && (n - 11) % 4 == 0) ? 1 : 0) << "n " << n;
    EXPECT_LE(cache.n_used_blocks(1), 4);
    if (n == 11) {
      EXPECT_EQ(cache.slot(0, 1, 4).block, 1);  // position 4: still in the window of 11
      EXPECT_THROW(cache.slot(0, 1, 3), Error);  // position 3: recycled
      EXPECT_EQ(cache.slot(0, 0, 3).block, 0);  // the global layer keeps everything
    }
    if (n == 24) {
      // Window blocks were reused in the order freed: 0 (at n 11) then 1 (at n 15).
      EXPECT_EQ(table(cache, 0, 1), (std::vector<int32_t>{-1, -1, -1, -1, 0, 1}));
      EXPECT_EQ(table(cache, 0, 0), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
    }
  }
  EXPECT_EQ(cache.n_tokens(0), 64);
  EXPECT_EQ(cache.n_used_blocks(0), 16);
  EXPECT_THROW(cache.reserve(0, 1), Error);  // past max_context
  cache.free_sequence(0);
  EXPECT_EQ(cache.n_free_blocks(0), 16);
  EXPECT_EQ(cache.n_free_blocks(1), 4);
}

TEST(KvCache, PrefillChunkKeepsKeysItsFirstQueryNeeds) {
  // Steps of up to 20 tokens: the window group needs ceil((8 + 20 - 2) / 4) + 1 = 8 blocks.
  KvCache cache(hybrid_config(20, 8, 16));
  ASSERT_EQ(cache.group(1).n_blocks, 8);
  cache.add_sequence(0);
  ASSERT_TRUE(cache.reserve(0, 20));
  EXPECT_EQ(table(cache, 0, 1), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  // Nothing is committed yet: the chunk's first query (position 0) still needs key 0.
  EXPECT_EQ(cache.recycle_window(0), 0);
  cache.commit(0, 20);
  // The next query is at 20 and reads 13 .. 20: blocks with positions 0 .. 11 go; block 3
  // (12 .. 15) stays although 12 is out of the window.
  EXPECT_EQ(cache.recycle_window(0), 3);
  EXPECT_EQ(table(cache, 0, 1), (std::vector<int32_t>{-1, -1, -1, 3, 4}));
  EXPECT_EQ(cache.slot(0, 1, 12).block, 3);
  EXPECT_THROW(cache.slot(0, 1, 11), Error);
  ASSERT_TRUE(cache.reserve(0, 20));  // positions 20 .. 39: 7 window blocks live, of 8
  EXPECT_EQ(table(cache, 0, 1), (std::vector<int32_t>{-1, -1, -1, 3, 4, 5, 6, 7, 0, 1}));
  EXPECT_EQ(cache.n_free_blocks(1), 1);
  cache.commit(0, 20);
  EXPECT_EQ(cache.recycle_window(0), 5);  // keys from 33 on: block 8 (32 .. 35) stays
  EXPECT_EQ(table(cache, 0, 1), (std::vector<int32_t>{-1, -1, -1, -1, -1, -1, -1, -1, 0, 1}));
}

TEST(KvCache, TruncateRollsBackRejectedDraftsAsIfNeverReserved) {
  // A speculative step: 10 confirmed tokens, then the last sampled token + 5 drafts are
  // reserved, computed and committed; the verifier keeps 2 drafts. Afterwards the pools
  // and tables must equal those of a run that only ever computed the 13 kept tokens.
  KvCache spec(hybrid_config(8, 8, 16));
  KvCache plain(hybrid_config(8, 8, 16));
  spec.add_sequence(0);
  plain.add_sequence(0);
  ASSERT_TRUE(spec.reserve(0, 10));
  spec.commit(0, 10);
  spec.recycle_window(0);
  ASSERT_TRUE(spec.reserve(0, 6));
  spec.commit(0, 6);
  spec.recycle_window(0, /*n_tentative=*/5);
  spec.truncate(0, 13);
  ASSERT_TRUE(plain.reserve(0, 10));
  plain.commit(0, 10);
  plain.recycle_window(0);
  ASSERT_TRUE(plain.reserve(0, 3));
  plain.commit(0, 3);
  plain.recycle_window(0);
  EXPECT_EQ(spec.n_tokens(0), 13);
  for (int g = 0; g < 2; ++g) {
    EXPECT_EQ(table(spec, 0, g), table(plain, 0, g)) << "group " << g;
    EXPECT_EQ(spec.n_used_blocks(g), plain.n_used_blocks(g)) << "group " << g;
  }
  // Decoding goes on from position 13.
  ASSERT_TRUE(spec.reserve(0, 1));
  EXPECT_EQ(spec.slot(0, 1, 13).block, spec.slot(0, 1, 12).block);
  spec.commit(0, 1);
  EXPECT_EQ(spec.n_tokens(0), 14);
}

TEST(KvCache, TentativeTokensKeepTheWindowKeysARollbackNeeds) {
  // Window 8, blocks of 4. 12 committed, then 6 more of which 5 are drafts: recycling
  // as if all 18 were real would free blocks with positions 0..7 (the next query at 18
  // reads 11..18), but after a rollback to 13 the query at 13 reads 6..13.
  KvCache cache(hybrid_config(8, 8, 16));
  cache.add_sequence(0);
  ASSERT_TRUE(cache.reserve(0, 12));
  cache.commit(0, 12);
  cache.recycle_window(0);  // the query at 12 reads 5..12: block 0 (0..3) goes
  ASSERT_TRUE(cache.reserve(0, 6));
  cache.commit(0, 6);
  EXPECT_EQ(cache.recycle_window(0, 5), 0);  // kept from 13 - 8 + 1 = 6: block 1 stays
  cache.truncate(0, 13);
  EXPECT_NO_THROW(cache.slot(0, 1, 6));
  EXPECT_EQ(table(cache, 0, 1).size(), 4u);
  // Without the margin a rollback into recycled keys is refused, changing nothing.
  ASSERT_TRUE(cache.reserve(0, 6));
  cache.commit(0, 6);
  EXPECT_EQ(cache.recycle_window(0), 2);  // query at 19 reads 12..19: blocks 1, 2 go
  EXPECT_THROW(cache.truncate(0, 13), Error);
  EXPECT_EQ(cache.n_tokens(0), 19);
  EXPECT_THROW(cache.truncate(0, 20), Error);  // past the committed tokens
  EXPECT_THROW(cache.recycle_window(0, 20), Error);
  cache.truncate(0, 19);  // a no-op
  EXPECT_EQ(cache.n_tokens(0), 19);
}

TEST(KvCache, WindowOnlyModelDecodesForeverOnlyIfAWindowFits) {
  // A Mistral-like model (every layer windowed, window 8, blocks of 4): decoding needs
  // ceil(7 / 4) + 1 = 3 blocks. With 3 it never stops; with 2 it stops at 8 tokens.
  for (int32_t n_blocks : {2, 3}) {
    KvCache cache(small_config({tiny(8), tiny(8)}, n_blocks * 2 * kBlockBytes, 1, 64, 1));
    ASSERT_EQ(cache.group(0).n_blocks, n_blocks);
    const int32_t expected = n_blocks == 2 ? 8 : 64;
    EXPECT_EQ(cache.max_tokens_per_sequence(), expected);
    cache.add_sequence(0);
    while (cache.n_tokens(0) < cache.max_context() && cache.reserve(0, 1)) {
      cache.commit(0, 1);
      cache.recycle_window(0);
    }
    EXPECT_EQ(cache.n_tokens(0), expected) << n_blocks << " blocks";
  }
  // The window group is never given more than its sequences can have live.
  KvCache roomy(small_config({tiny(8)}, 1 << 20, 2, 64, 4));
  EXPECT_EQ(roomy.group(0).n_blocks, 2 * 4);
}

TEST(KvCache, InterleavedSequencesKeepTheInvariants) {
  // A global layer and windows 8 and 13; three sequences advancing by random steps of up
  // to 7 tokens, preempted (freed) when the global pool runs dry.
  const int32_t kStep = 7, kContext = 200, kBlock = 4;
  const std::vector<int32_t> windows = {0, 8, 13};
  const int32_t window_blocks = 3 * kv_window_blocks(8, kStep, kBlock, kContext) +
                                3 * kv_window_blocks(13, kStep, kBlock, kContext);
  KvCache cache(small_config({tiny(0), tiny(8), tiny(13)}, (window_blocks + 60) * kBlockBytes, 3,
                             kContext, kStep));
  ASSERT_EQ(cache.n_groups(), 3);
  ASSERT_EQ(cache.group(0).n_blocks, 60);
  std::mt19937 rng(1234);
  int n_refused = 0, n_recycled = 0;
  for (int iteration = 0; iteration < 4000; ++iteration) {
    const int32_t seq = static_cast<int32_t>(rng() % 3);
    if (!cache.has_sequence(seq)) {
      cache.add_sequence(seq);
      continue;
    }
    const int32_t m = 1 + static_cast<int32_t>(rng() % kStep);
    if (cache.n_tokens(seq) + m > kContext) {
      cache.free_sequence(seq);
      continue;
    }
    if (!cache.reserve(seq, m)) {
      // Window groups are sized for every sequence: only the global pool may run out.
      const int32_t need = (cache.n_tokens(seq) + m + kBlock - 1) / kBlock -
                           cache.capacity(seq) / kBlock;
      EXPECT_LT(cache.n_free_blocks(0), need);
      EXPECT_GE(cache.n_free_blocks(1), need);
      EXPECT_GE(cache.n_free_blocks(2), need);
      ++n_refused;
      cache.free_sequence(seq);
      continue;
    }
    cache.commit(seq, m);
    n_recycled += cache.recycle_window(seq);

    for (int g = 0; g < cache.n_groups(); ++g) {
      const int32_t window = cache.group(g).window;
      std::set<int32_t> seen;
      int32_t live_total = 0;
      for (int32_t s = 0; s < 3; ++s) {
        if (!cache.has_sequence(s)) continue;
        const std::span<const int32_t> t = cache.block_table(s, g);
        ASSERT_EQ(static_cast<int32_t>(t.size()) * kBlock, cache.capacity(s));
        const int32_t first_needed = window == 0 ? 0 : cache.n_tokens(s) - window + 1;
        int32_t live = 0;
        for (size_t i = 0; i < t.size(); ++i) {
          const bool out_of_window = int32_t(i + 1) * kBlock <= first_needed;
          // A block is recycled exactly when all its positions left the window.
          ASSERT_EQ(t[i] < 0, out_of_window) << "group " << g << " seq " << s << " block " << i;
          if (t[i] < 0) continue;
          ++live;
          ASSERT_TRUE(seen.insert(t[i]).second) << "block " << t[i] << " held twice";
        }
        if (window > 0) {
          ASSERT_LE(live, kv_window_blocks(window, kStep, kBlock, kContext));
        }
        live_total += live;
        for (int32_t pos = std::max(0, first_needed); pos < cache.capacity(s); ++pos) {
          ASSERT_GE(cache.slot(s, g, pos).block, 0);
        }
      }
      ASSERT_EQ(live_total, cache.n_used_blocks(g));
    }
  }
  EXPECT_GT(n_refused, 0);   // the run did exercise preemption
  EXPECT_GT(n_recycled, 100);  // and recycling
}

TEST(KvCache, RowsOfEveryLayerBlockAndSlotAreDistinctStorage) {
  // Layers of different shapes; one is windowed.
  KvCacheConfig config = small_config({{1, 2, 0}, {2, 3, 8}, {1, 5, 0}}, 4096, 1, 16, 4);
  KvCache cache(config);
  auto value = [](int il, int block, int offset, int e, bool is_v) {
    const float x = float(il * 1000000 + block * 10000 + offset * 100 + e);
    return is_v ? -x - 1 : x;
  };
  for (int pass = 0; pass < 2; ++pass) {
    for (int32_t il = 0; il < cache.n_layer(); ++il) {
      const KvLayerView view = cache.layer(il);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(view.k) % 64, 0u);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(view.v) % 64, 0u);
      EXPECT_EQ(view.n_blocks, cache.group(cache.group_of_layer(il)).n_blocks);
      EXPECT_EQ(view.row_bytes, size_t(view.n_kv_head * view.d_head) * 4);
      const int n_elements = view.n_kv_head * view.d_head;
      for (int32_t b = 0; b < view.n_blocks; ++b) {
        for (int32_t o = 0; o < view.block_size; ++o) {
          auto* k = static_cast<float*>(cache.k_row(il, b, o));
          auto* v = static_cast<float*>(cache.v_row(il, b, o));
          ASSERT_EQ(k, view.k_row(b, o));
          ASSERT_EQ(v, view.v_row(b, o));
          // The pool is [n_blocks][block_size][n_kv_head][d_head].
          ASSERT_EQ(k, static_cast<float*>(view.k) + (b * view.block_size + o) * n_elements);
          for (int e = 0; e < n_elements; ++e) {
            if (pass == 0) {
              k[e] = value(il, b, o, e, false);
              v[e] = value(il, b, o, e, true);
            } else {
              ASSERT_EQ(k[e], value(il, b, o, e, false));
              ASSERT_EQ(v[e], value(il, b, o, e, true));
            }
          }
        }
      }
    }
  }
}

TEST(KvCache, SequenceMisuseThrows) {
  KvCache cache(small_config({tiny(0)}, 16 * kBlockBytes, 2, 64, 16));
  EXPECT_THROW(cache.add_sequence(2), Error);
  EXPECT_THROW(cache.add_sequence(-1), Error);
  EXPECT_THROW(cache.reserve(0, 1), Error);  // not added
  cache.add_sequence(0);
  EXPECT_THROW(cache.add_sequence(0), Error);
  ASSERT_TRUE(cache.reserve(0, 3));
  EXPECT_THROW(cache.commit(0, 5), Error);  // beyond the reserved 4
  EXPECT_EQ(cache.n_tokens(0), 0);
  EXPECT_THROW(cache.slot(0, 0, 4), Error);
  EXPECT_THROW(cache.block_table(0, 1), Error);
  EXPECT_THROW(cache.reserve(0, 65), Error);  // past max_context
  EXPECT_THROW(cache.reserve(0, -1), Error);
}

TEST(KvCache, CanFitCountsBlocksAndSequenceSlots) {
  KvCache cache(small_config({tiny(0)}, 8 * kBlockBytes, 2, 64, 16));  // 8 blocks of 4
  EXPECT_TRUE(cache.can_fit(32));
  EXPECT_FALSE(cache.can_fit(33));
  EXPECT_FALSE(cache.can_fit(65));
  cache.add_sequence(0);
  ASSERT_TRUE(cache.reserve(0, 20));  // 5 blocks
  EXPECT_TRUE(cache.can_fit(12));
  EXPECT_FALSE(cache.can_fit(13));
  cache.add_sequence(1);
  EXPECT_FALSE(cache.can_fit(1));  // no free sequence slot
  EXPECT_EQ(cache.max_tokens_per_sequence(), 32);
}

// The counter the no-allocation tests rely on sees both forms of new.
TEST(AllocationCounter, CountsPlainAndNothrowNew) {
  const long before = test::allocations();
  auto plain = std::make_unique<std::vector<int>>(100);
  std::unique_ptr<int> nothrow(new (std::nothrow) int(7));
  EXPECT_GE(test::allocations(), before + 3);  // the vector, its 100 ints, the int
  EXPECT_EQ(plain->size() + static_cast<size_t>(*nothrow), 107u);
}

TEST(KvCache, StepLoopDoesNotAllocate) {
  KvCache cache(hybrid_config(4, 8, 16));
  cache.add_sequence(0);
  const long before = test::allocations();
  for (int round = 0; round < 3; ++round) {
    for (int32_t n = 0; n < 60; n += 2) {
      ASSERT_TRUE(cache.reserve(0, 2));
      const KvSlot s = cache.slot(0, 1, n);
      *static_cast<float*>(cache.k_row(1, s.block, s.offset)) = 1.0f;
      cache.commit(0, 2);
      cache.recycle_window(0);
    }
    cache.free_sequence(0);
    cache.add_sequence(0);  // tables keep their capacity
  }
  EXPECT_EQ(test::allocations(), before);
}

}  // namespace
}  // namespace ridge
