// The f16 KV cache against the f32 one on the real models users run (skipped when absent
// from the model cache; scripts/fetch-models gemma3-270m qwen2.5-coder-0.5b). The matmuls
// run in f32 (MatmulMode::kFloat) so that the cache's rounding is the only difference:
// greedy output is token for token the same for 32 tokens, and the mean KL divergence
// over WikiText-2 windows is below 1e-4. With the default 8-bit activations any change
// to K/V, even a relative 1e-7, re-rolls the rounding of activations downstream and costs
// about 1e-3 on these Q4_K_M models, f16 or not; tests/python/test_kv_f16.py checks that
// path end to end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "kernels/matmul.h"

namespace ridge {
namespace {

using test::cached_model;

namespace fs = std::filesystem;

// Matmuls in f32 for the scope of the test (the mode is process-wide).
struct FloatMatmuls {
  FloatMatmuls() { kernels::set_matmul_mode(kernels::MatmulMode::kFloat); }
  ~FloatMatmuls() { kernels::set_matmul_mode(kernels::MatmulMode::kQuantized); }
};

constexpr int32_t kWindow = 512, kScored = 128, kWindows = 2;

std::unique_ptr<Engine> engine_for(Model& model, const Tokenizer& tok, DType kv_type) {
  EngineOptions o;
  o.parallel = 2;
  o.max_batch_tokens = kWindow;
  o.n_ctx = kWindow + 64;
  o.prefix_cache = false;
  o.kv_type = kv_type;
  auto e = std::make_unique<Engine>(model, tok, o);
  e->start();
  return e;
}

// log_softmax(logits) in double.
void log_softmax(std::span<const float> logits, std::vector<double>& out) {
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(x - max);
  const double log_sum = std::log(sum) + max;
  out.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - log_sum;
}

void expect_f16_cache_matches_f32(const std::string& name) {
  const std::string path = cached_model(name);
  if (path.empty()) GTEST_SKIP() << name << " is not in the model cache (scripts/fetch-models " << name << ")";
  FloatMatmuls float_matmuls;
  auto model = Model::load(path, {.n_threads = 2, .max_batch_tokens = kWindow});
  const Tokenizer tok = Tokenizer::from_gguf(model->file());
  auto f32 = engine_for(*model, tok, DType::F32);
  auto f16 = engine_for(*model, tok, DType::F16);

  // Both prompts in the same steps (each step dequantizes every weight once).
  std::vector<RequestParams> prompts;
  for (const char* prompt : {"The capital of France is", "def quicksort(items):\n"}) {
    RequestParams p;
    p.prompt = tok.encode(prompt);
    p.max_tokens = 32;
    p.sampling.temperature = 0;
    p.ignore_eos = true;
    prompts.push_back(std::move(p));
  }
  std::vector<test::Output> want;  // one engine at a time: they share the model's buffers
  for (const auto& stream : f32->submit(prompts)) want.push_back(test::collect(*stream));
  std::vector<test::Output> got;
  for (const auto& stream : f16->submit(prompts)) got.push_back(test::collect(*stream));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const test::Output& w = want[i];
    const test::Output& g = got[i];
    ASSERT_EQ(w.tokens.size(), 32u);
    EXPECT_EQ(g.tokens, w.tokens) << name << ", prompt " << i << ": '" << g.text << "' vs '" << w.text << "'";
  }

  // KL divergence of the f16 cache's next-token distributions from the f32 cache's, over
  // the last kScored positions of kWindows windows of WikiText-2 (BOS first, as
  // ridge perplexity's windows).
  std::ifstream in(std::string(RIDGE_FIXTURES) + "/text/wiki.test.raw", std::ios::binary);
  ASSERT_TRUE(in) << "wiki.test.raw missing under " << RIDGE_FIXTURES;
  std::string text(64 * 1024, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  const std::vector<int32_t> tokens = tok.encode(text, /*add_special=*/true, /*parse_special=*/false);
  ASSERT_GE(tokens.size(), static_cast<size_t>(kWindow * kWindows));
  const size_t n_vocab = static_cast<size_t>(model->config().n_vocab);
  std::vector<float> base(static_cast<size_t>(kScored) * n_vocab);  // the f32 cache's log-probs
  std::vector<double> lp;
  double kld_sum = 0;
  int64_t n_rows = 0, same_top = 0;
  for (int32_t w = 0; w < kWindows; ++w) {
    RequestParams p;
    p.prompt.assign(tokens.begin() + w * kWindow, tokens.begin() + (w + 1) * kWindow);
    if (tok.vocab().add_bos() && tok.bos() >= 0) p.prompt[0] = tok.bos();
    p.score_from = kWindow - 1 - kScored;
    p.score = [&](int32_t position, std::span<const float> logits) {
      log_softmax(logits, lp);
      float* row = base.data() + static_cast<size_t>(position - p.score_from) * n_vocab;
      std::copy(lp.begin(), lp.end(), row);
    };
    EXPECT_EQ(test::collect(*f32->submit(p)).error, "");
    p.score = [&](int32_t position, std::span<const float> logits) {
      log_softmax(logits, lp);
      const float* row = base.data() + static_cast<size_t>(position - p.score_from) * n_vocab;
      double kld = 0;
      for (size_t i = 0; i < n_vocab; ++i) kld += std::exp(double{row[i]}) * (row[i] - lp[i]);
      kld_sum += kld;
      ++n_rows;
      same_top += std::max_element(row, row + n_vocab) - row == std::max_element(lp.begin(), lp.end()) - lp.begin();
    };
    EXPECT_EQ(test::collect(*f16->submit(p)).error, "");
  }
  ASSERT_EQ(n_rows, int64_t{kScored} * kWindows);
  const double mean_kld = kld_sum / static_cast<double>(n_rows);
  std::printf("%s: f16 KV cache vs f32, f32 matmuls: mean KLD %.3g over %lld positions, same top token %.2f%%\n",
              name.c_str(), mean_kld, static_cast<long long>(n_rows), 100.0 * same_top / n_rows);
  EXPECT_LT(std::fabs(mean_kld), 1e-4);
}

TEST(KvF16RealModels, Gemma3_270m) { expect_f16_cache_matches_f32("gemma3-270m"); }

TEST(KvF16RealModels, Qwen2_5Coder0_5b) { expect_f16_cache_matches_f32("qwen2.5-coder-0.5b"); }

}  // namespace
}  // namespace ridge
