// The tensor-parallel cut (model/tensor_parallel.h) on model shapes written out here: which
// heads, KV heads and feed-forward features each rank gets, the zero-copy views that
// result, and the clear errors for cuts that cannot be made. The numerical check (-np 2
// against -np 1 on real models) is tests/python/test_tensor_parallel.py.
#include "model/tensor_parallel.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace ridge {
namespace {

// Qwen2.5-0.5B's shape: 14 heads, 2 KV heads of 64, feed-forward 4864 (19 Q6_K blocks in
// ffn_down's rows), attn_output in Q5_0 (blocks of 32).
struct Shape {
  ModelConfig config;
  ModelWeights weights;
  std::vector<uint8_t> bytes = std::vector<uint8_t>(1 << 20);
};

Shape qwen_like() {
  Shape s;
  ModelConfig& c = s.config;
  c.arch = "qwen2";
  c.name = "test";
  c.n_embd = 896;
  c.n_layer = 2;
  c.n_head = 14;
  c.n_kv_head = 2;
  c.d_head = 64;
  c.n_ff = 4864;
  c.n_vocab = 1001;
  auto matrix = [&](DType t, int64_t n_in, int64_t n_out) {
    return kernels::WeightMatrix{t, n_in, n_out, s.bytes.data(), row_size(t, n_in)};
  };
  for (int il = 0; il < c.n_layer; ++il) {
    LayerWeights l;
    l.wq = matrix(DType::Q5_0, c.n_embd, 896);
    l.wk = matrix(DType::Q5_0, c.n_embd, 128);
    l.wv = matrix(DType::Q8_0, c.n_embd, 128);
    l.wo = matrix(DType::Q5_0, 896, c.n_embd);
    l.w_gate = matrix(DType::Q5_0, c.n_embd, c.n_ff);
    l.w_up = matrix(DType::Q5_0, c.n_embd, c.n_ff);
    l.w_down = matrix(DType::Q6_K, c.n_ff, c.n_embd);
    s.weights.layers.push_back(l);
  }
  s.weights.output = matrix(DType::Q8_0, c.n_embd, c.n_vocab);
  return s;
}

void expect_error(const Shape& s, int n_ranks, const std::string& phrase) {
  try {
    plan_tp_shard(s.config, s.weights, 0, n_ranks);
    FAIL() << "expected an error containing '" << phrase << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
}

TEST(TensorParallel, OneRankIsTheWholeModel) {
  const Shape s = qwen_like();
  const TpShard one = plan_tp_shard(s.config, s.weights, 0, 1);
  EXPECT_EQ(one.n_head, 14);
  EXPECT_EQ(one.n_kv_head, 2);
  EXPECT_EQ(one.n_ff, 4864);
}

TEST(TensorParallel, HeadsWholeAndFeedForwardOnQuantBlocks) {
  const Shape s = qwen_like();
  const TpShard r0 = plan_tp_shard(s.config, s.weights, 0, 2);
  const TpShard r1 = plan_tp_shard(s.config, s.weights, 1, 2);
  EXPECT_EQ(r0.head_first, 0);
  EXPECT_EQ(r1.head_first, 7);
  EXPECT_EQ(r0.n_head, 7);
  EXPECT_EQ(r0.kv_head_first, 0);
  EXPECT_EQ(r1.kv_head_first, 1);
  EXPECT_EQ(r1.n_kv_head, 1);
  // 19 blocks of 256: 9 and 10, meeting on a block boundary and covering all of them.
  EXPECT_EQ(r0.ff_first, 0);
  EXPECT_EQ(r0.n_ff, 9 * 256);
  EXPECT_EQ(r1.ff_first, 9 * 256);
  EXPECT_EQ(r1.n_ff, 10 * 256);
  // The vocabulary (output rows) as evenly as rows go.
  EXPECT_EQ(r0.vocab_first, 0);
  EXPECT_EQ(r0.n_vocab, 500);
  EXPECT_EQ(r1.vocab_first, 500);
  EXPECT_EQ(r1.n_vocab, 501);
}

TEST(TensorParallel, FewerKvHeadsThanRanksRepeatsThem) {
  Shape s = qwen_like();
  s.config.n_head = 8;  // 4 ranks: 2 query heads each; KV head 0 for ranks 0, 1, head 1 for 2, 3
  s.config.d_head = 128;
  for (int r = 0; r < 4; ++r) {
    const TpShard shard = plan_tp_shard(s.config, s.weights, r, 4);
    EXPECT_EQ(shard.n_head, 2);
    EXPECT_EQ(shard.n_kv_head, 1);
    EXPECT_EQ(shard.kv_head_first, r / 2) << r;
    // The query heads of the rank all use that KV head (group of 8 / 2 = 4 query heads).
    EXPECT_EQ(shard.head_first / 4, shard.kv_head_first) << r;
  }
}

TEST(TensorParallel, ShardedViewsPointIntoTheSameBytes) {
  Shape s = qwen_like();
  const uint8_t* base = s.bytes.data();
  const TpShard r1 = plan_tp_shard(s.config, s.weights, 1, 2);
  shard_weights(s.weights, s.config, r1);
  const LayerWeights& l = s.weights.layers[0];
  // Column splits: a range of rows.
  EXPECT_EQ(l.wq.n_out, 7 * 64);
  EXPECT_EQ(l.wq.data, base + 7 * 64 * row_size(DType::Q5_0, 896));
  EXPECT_EQ(l.wk.data, base + 64 * row_size(DType::Q5_0, 896));
  EXPECT_EQ(l.w_up.data, base + size_t{9 * 256} * row_size(DType::Q5_0, 896));
  // Row splits: blocks inside every row, the stride still the whole row's.
  EXPECT_EQ(l.wo.n_in, 7 * 64);
  EXPECT_EQ(l.wo.data, base + row_size(DType::Q5_0, 7 * 64));
  EXPECT_EQ(l.wo.row_bytes, row_size(DType::Q5_0, 896));
  EXPECT_EQ(l.w_down.n_in, 10 * 256);
  EXPECT_EQ(l.w_down.data, base + row_size(DType::Q6_K, 9 * 256));
  EXPECT_EQ(l.w_down.row_bytes, row_size(DType::Q6_K, 4864));
  EXPECT_EQ(s.weights.output.n_out, 501);
  EXPECT_EQ(s.weights.output.data, base + 500 * row_size(DType::Q8_0, 896));
}

TEST(TensorParallel, ImpossibleCutsAreClearErrors) {
  expect_error(qwen_like(), 4, "14 attention heads, which do not divide by 4");
  Shape three = qwen_like();
  three.config.n_head = 12;
  three.config.n_kv_head = 4;
  expect_error(three, 3, "4 KV heads: 3 ranks must divide them or be a multiple of them");
  // 12 heads x 64 in Q4_K rows: 6 x 64 = 384 values per rank is not whole blocks of 256.
  Shape k_quant = qwen_like();
  k_quant.config.n_head = 12;
  for (LayerWeights& l : k_quant.weights.layers)
    l.wo = {DType::Q4_K, 768, 896, k_quant.bytes.data(), row_size(DType::Q4_K, 768)};
  expect_error(k_quant, 2, "6 heads x 64 per rank do not fill whole blocks of 256 in attn_output (q4_K)");
  Shape narrow = qwen_like();
  narrow.config.n_ff = 256;
  for (LayerWeights& l : narrow.weights.layers) l.w_down.n_in = 256;
  expect_error(narrow, 2, "the feed-forward width 256 is 1 blocks of 256");
  Shape moe = qwen_like();
  moe.config.n_expert = 8;
  expect_error(moe, 2, "mixture-of-experts");
}

}  // namespace
}  // namespace ridge
