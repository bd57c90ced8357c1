// Embeddings: EmbeddingPool's arithmetic exactly, and engine requests with
// RequestParams::hidden on stories260K: the pooled vector equals the model's own final
// hidden states pooled by hand, alone or batched with other work, chunked, preempted or
// beside a prefix cache that holds its prompt.
#include "engine/embedding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine_test_util.h"

namespace ridge {
namespace {

TEST(EmbeddingPool, MeanIsTheNormalisedAverageInAnyOrder) {
  EmbeddingPool pool(Pooling::kMean, 2, 3);
  pool.add(2, std::vector<float>{5, 1});
  pool.add(0, std::vector<float>{1, 2});
  pool.add(1, std::vector<float>{0, 1});
  const std::vector<float> v = pool.result();  // mean (2, 4/3) scaled to unit length
  const double norm = std::sqrt(4.0 + 16.0 / 9.0);
  EXPECT_FLOAT_EQ(v[0], static_cast<float>(2.0 / norm));
  EXPECT_FLOAT_EQ(v[1], static_cast<float>(4.0 / 3.0 / norm));
}

TEST(EmbeddingPool, LastAndClsTakeOneTokensState) {
  EmbeddingPool last(Pooling::kLast, 2, 2);
  EmbeddingPool cls(Pooling::kCls, 2, 2);
  for (EmbeddingPool* p : {&last, &cls}) {
    p->add(0, std::vector<float>{3, 4});
    p->add(1, std::vector<float>{0, -2});
  }
  EXPECT_EQ(last.result(), (std::vector<float>{0, -1}));
  EXPECT_EQ(cls.result(), (std::vector<float>{0.6f, 0.8f}));
}

TEST(EmbeddingPool, ZeroStaysZero) {
  EmbeddingPool pool(Pooling::kMean, 3, 1);
  pool.add(0, std::vector<float>{0, 0, 0});
  EXPECT_EQ(pool.result(), (std::vector<float>{0, 0, 0}));
}

TEST(EmbeddingPool, RefusesWhatItCannotPool) {
  EXPECT_THROW(EmbeddingPool(Pooling::kNone, 2, 1), Error);
  EXPECT_THROW(EmbeddingPool(Pooling::kRank, 2, 1), Error);
  EXPECT_THROW(EmbeddingPool(Pooling::kMean, 2, 0), Error);
  EmbeddingPool pool(Pooling::kMean, 2, 2);
  EXPECT_THROW(pool.add(2, std::vector<float>{1, 1}), Error);     // outside the input
  EXPECT_THROW(pool.add(0, std::vector<float>{1, 1, 1}), Error);  // wrong length
  pool.add(0, std::vector<float>{1, 1});
  EXPECT_THROW(pool.add(0, std::vector<float>{1, 1}), Error);     // twice
  EXPECT_THROW(pool.result(), Error);                             // position 1 missing
  EmbeddingPool last(Pooling::kLast, 2, 2);
  last.add(0, std::vector<float>{1, 1});
  EXPECT_THROW(last.result(), Error);
}

// ---------------------------------------------------------------- on stories260K

using test::stories;

int32_t n_embd() { return stories().model->config().n_embd; }

EngineOptions options(int32_t parallel, int32_t max_batch_tokens) {
  EngineOptions o;
  o.parallel = parallel;
  o.max_batch_tokens = max_batch_tokens;
  o.n_ctx = 512;
  o.prefix_cache = false;
  o.kv_type = DType::F32;
  return o;
}

// An embedding request and the pool it fills.
struct Embedding {
  RequestParams params;
  std::shared_ptr<EmbeddingPool> pool;
};

Embedding embedding(const std::string& text) {
  Embedding e;
  e.params.prompt = stories().tokenizer->encode(text);
  e.pool = std::make_shared<EmbeddingPool>(Pooling::kMean, n_embd(), static_cast<int32_t>(e.params.prompt.size()));
  e.params.hidden = [pool = e.pool](int32_t position, std::span<const float> h) { pool->add(position, h); };
  return e;
}

std::vector<float> finish(RequestStream& stream, const Embedding& e) {
  const test::Output out = test::collect(stream);
  EXPECT_EQ(out.reason, FinishReason::kLength) << out.error;
  EXPECT_TRUE(out.tokens.empty());
  return e.pool->result();
}

// The model's final hidden states of a whole prompt in one forward pass, mean-pooled and
// normalised by hand: what the engine must give, however it splits the work.
std::vector<float> direct_embedding(const std::vector<int32_t>& prompt) {
  Model& model = *stories().model;
  KvCacheConfig config = model.kv_cache_config(size_t{8} << 20, 1, 512);
  config.dtype = DType::F32;  // as the engines below: the comparison is of the forward pass
  KvCache cache(config);
  cache.add_sequence(0);
  EXPECT_TRUE(cache.reserve(0, static_cast<int32_t>(prompt.size())));
  Batch b;
  b.add_sequence(0, 0, prompt, LogitRows::kNone);
  b.add_hidden_rows(0, b.n_tokens());
  std::vector<double> sum(static_cast<size_t>(n_embd()), 0.0);
  LogitSink sink;
  sink.max_rows = 1;
  sink.on_hidden = [&](int32_t n, const float* rows) {
    EXPECT_EQ(n, static_cast<int32_t>(prompt.size()));
    for (int32_t t = 0; t < n; ++t)
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += rows[static_cast<size_t>(t) * sum.size() + i];
  };
  model.forward(b, cache, sink);
  double norm2 = 0;
  for (double v : sum) norm2 += v * v;
  std::vector<float> out;
  for (double v : sum) out.push_back(static_cast<float>(v / std::sqrt(norm2)));
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tolerance, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  EXPECT_LE(worst, tolerance) << what;
}

const std::vector<std::string> kTexts = {
    "Once upon a time",
    "Lily and Ben went to the park. They played all day and were happy. The sun was hot.",
    "The dog",
    "Tom had a red ball. He threw it high and the ball went over the fence. Tom was sad, but his friend "
    "Sue found it and gave it back. They laughed and played until the sun went down.",
};

TEST(EngineEmbedding, EqualsTheModelsHiddenStatesPooledByHand) {
  // A 16-token step budget cuts the long prompts into chunks.
  Engine engine(*stories().model, *stories().tokenizer, options(2, 16));
  engine.start();
  for (const std::string& text : kTexts) {
    Embedding e = embedding(text);
    const std::vector<float> want = direct_embedding(e.params.prompt);
    const std::vector<float> got = finish(*engine.submit(e.params), e);
    expect_close(got, want, 1e-5f, text.c_str());
    double norm2 = 0;
    for (float v : got) norm2 += double{v} * v;
    EXPECT_NEAR(norm2, 1.0, 1e-5);
  }
  const EngineMetrics m = test::wait_until_idle(engine);
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.generation_tokens_total, 0u);
}

TEST(EngineEmbedding, BatchedWithGenerationAndPreemptedGivesTheVectorsAlone) {
  // kTexts and three longer inputs (~100 tokens each) that cannot all fit at once below.
  std::vector<std::string> texts = kTexts;
  for (int i = 0; i < 3; ++i) texts.push_back(std::to_string(i) + " " + kTexts[1] + " " + kTexts[3]);
  std::vector<std::vector<float>> alone;
  {
    Engine engine(*stories().model, *stories().tokenizer, options(1, 64));
    engine.start();
    for (const std::string& text : texts) {
      Embedding e = embedding(text);
      alone.push_back(finish(*engine.submit(e.params), e));
    }
  }
  // Everything at once with two generating requests, in 8 blocks of KV (128 tokens, f32
  // at 1280 bytes a token): the youngest are preempted and computed again.
  EngineOptions o = options(8, 64);
  o.kv_budget_bytes = 8 * 16 * 1280;
  Engine engine(*stories().model, *stories().tokenizer, o);
  engine.start();
  std::vector<RequestParams> params;
  for (int i = 0; i < 2; ++i) {
    RequestParams g;
    g.prompt = stories().tokenizer->encode("Once upon a time there was a cat");
    g.max_tokens = 100;
    g.sampling.temperature = 0;
    g.ignore_eos = true;
    params.push_back(g);
  }
  std::vector<Embedding> es;
  for (const std::string& text : texts) {
    es.push_back(embedding(text));
    params.push_back(es.back().params);
  }
  std::vector<std::shared_ptr<RequestStream>> streams = engine.submit(params);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(test::collect(*streams[i]).completion_tokens, 100);
  for (size_t i = 0; i < texts.size(); ++i) expect_close(finish(*streams[i + 2], es[i]), alone[i], 1e-6f, texts[i].c_str());
  const EngineMetrics m = test::wait_until_idle(engine);
  EXPECT_GT(m.preemptions_total, 0u);
  EXPECT_EQ(m.kv_blocks_used, 0);
}

TEST(EngineEmbedding, IgnoresAPrefixCacheThatHoldsItsPrompt) {
  const std::string text = kTexts[3];
  EngineOptions o = options(2, 64);
  o.prefix_cache = true;
  Engine engine(*stories().model, *stories().tokenizer, o);
  engine.start();
  RequestParams g;
  g.prompt = stories().tokenizer->encode(text);
  g.max_tokens = 4;
  g.sampling.temperature = 0;
  test::collect(*engine.submit(g));  // its prompt's blocks are now cached
  test::wait_until_idle(engine);
  Embedding e = embedding(text);
  const std::vector<float> want = direct_embedding(e.params.prompt);  // before: the engine owns the model after
  const test::Output out = test::collect(*engine.submit(e.params));
  EXPECT_EQ(out.cached_prompt_tokens, 0);
  expect_close(e.pool->result(), want, 1e-5f, "after a cached prompt");
  EXPECT_GT(test::wait_until_idle(engine).prefix_cache_queries, 0u);
}

TEST(EngineEmbedding, SubmitRefusesAnEmbeddingThatAlsoScoresOrIsTooLong) {
  Engine engine(*stories().model, *stories().tokenizer, options(1, 64));
  Embedding e = embedding("Once upon a time");
  e.params.score = [](int32_t, std::span<const float>) {};
  try {
    engine.submit(e.params);
    FAIL() << "scoring and embedding together were accepted";
  } catch (const EngineError& err) {
    EXPECT_EQ(err.status, 400);
  }
  Embedding longer = embedding("x");
  longer.params.prompt.assign(513, 1);
  try {
    engine.submit(longer.params);
    FAIL() << "a prompt over the context was accepted";
  } catch (const EngineError& err) {
    EXPECT_EQ(err.status, 400);
    EXPECT_EQ(err.code, "context_length_exceeded");
  }
}

}  // namespace
}  // namespace ridge
