// Every KV cache type against the f32 cache on the real models users run (skipped when
// absent from the model cache; scripts/fetch-models gemma3-270m qwen2.5-coder-0.5b). The
// matmuls run in f32 (MatmulMode::kFloat) so that the cache's rounding is the only
// difference: with f16, greedy output is token for token the same for 32 tokens and the
// mean KL divergence over WikiText-2 windows is below 1e-4; bf16, q8_0 and q4_0 round
// harder and are held to bounds a few times what they measure (see each test). With the
// default 8-bit activations any change to K/V, even a relative 1e-7, re-rolls the
// rounding of activations downstream and costs about 1e-3 on these Q4_K_M models, f16 or
// not; tests/python/test_kv_f16.py checks that path end to end.
//
// Prefix-cache reuse and preemption keep every output in the quantized types (the f32 and
// f16 caches are covered on stories260K in engine_test.cpp, whose heads are too small for
// the quantized types' blocks of 32; bf16 shares f16's one-value-per-unit path).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "kernels/gemm/gemm.h"

namespace ridge {
namespace {

using test::cached_model;

namespace fs = std::filesystem;

// Matmuls in f32 for the scope of the test (the mode is process-wide).
struct FloatMatmuls {
  FloatMatmuls() { kernels::set_matmul_mode(kernels::MatmulMode::kFloat); }
  ~FloatMatmuls() { kernels::set_matmul_mode(kernels::MatmulMode::kQuantized); }
};

constexpr int32_t kWindow = 512, kScored = 256, kWindows = 1;

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

RequestParams greedy_request(const Tokenizer& tok, const std::string& prompt, int32_t max_tokens) {
  RequestParams p;
  p.prompt = tok.encode(prompt);
  p.max_tokens = max_tokens;
  p.sampling.temperature = 0;
  p.ignore_eos = true;
  return p;
}

struct VersusF32 {
  std::vector<test::Output> greedy;  // the two prompts' 32 tokens
  double mean_kld = 0;               // of this cache's next-token distributions from f32's
  double same_top = 0;               // fraction of positions with the same top token
};

// Runs the f32 cache once, then each type against it.
class CacheComparison {
 public:
  explicit CacheComparison(const std::string& name) : name_(name) {
    const std::string path = cached_model(name);
    if (path.empty()) return;
    model_ = Model::load(path, {.n_threads = 2, .max_batch_tokens = kWindow});
    tok_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(model_->file()));
    for (const char* prompt : {"The capital of France is", "def quicksort(items):\n"})
      prompts_.push_back(greedy_request(*tok_, prompt, 32));
    std::ifstream in(std::string(RIDGE_FIXTURES) + "/text/wiki.test.raw", std::ios::binary);
    std::string text(64 * 1024, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(in.gcount()));
    tokens_ = tok_->encode(text, /*add_special=*/true, /*parse_special=*/false);
    n_vocab_ = static_cast<size_t>(model_->config().n_vocab);
    base_.resize(static_cast<size_t>(kScored * kWindows) * n_vocab_);
    auto f32 = engine_for(*model_, *tok_, DType::F32);
    for (const auto& stream : f32->submit(prompts_)) base_greedy_.push_back(test::collect(*stream));
    for (int32_t w = 0; w < kWindows; ++w) {
      score_window(*f32, w, [&](size_t row, std::span<const double> lp) {
        std::copy(lp.begin(), lp.end(), base_.begin() + static_cast<std::ptrdiff_t>(row * n_vocab_));
      });
    }
  }

  bool loaded() const { return model_ != nullptr; }
  const std::vector<test::Output>& base_greedy() const { return base_greedy_; }

  // with_greedy: also the two prompts' greedy tokens (the slow part: each f32 step
  // dequantizes every weight).
  VersusF32 run(DType kv_type, bool with_greedy) {
    VersusF32 r;
    auto engine = engine_for(*model_, *tok_, kv_type);
    if (with_greedy)
      for (const auto& stream : engine->submit(prompts_)) r.greedy.push_back(test::collect(*stream));
    double kld_sum = 0;
    int64_t n_rows = 0, same_top = 0;
    for (int32_t w = 0; w < kWindows; ++w) {
      score_window(*engine, w, [&](size_t row, std::span<const double> lp) {
        const float* b = base_.data() + row * n_vocab_;
        double kld = 0;
        for (size_t i = 0; i < n_vocab_; ++i) kld += std::exp(double{b[i]}) * (b[i] - lp[i]);
        kld_sum += kld;
        ++n_rows;
        same_top += std::max_element(b, b + n_vocab_) - b == std::max_element(lp.begin(), lp.end()) - lp.begin();
      });
    }
    EXPECT_EQ(n_rows, int64_t{kScored} * kWindows);
    r.mean_kld = kld_sum / static_cast<double>(n_rows);
    r.same_top = static_cast<double>(same_top) / static_cast<double>(n_rows);
    std::printf("%s: %s KV cache vs f32, f32 matmuls: mean KLD %.3g over %lld positions, same top token %.2f%%\n",
                name_.c_str(), std::string(dtype_name(kv_type)).c_str(), r.mean_kld, static_cast<long long>(n_rows),
                100.0 * r.same_top);
    return r;
  }

 private:
  // The last kScored positions of window w of WikiText-2 (BOS first, as ridge
  // perplexity's windows): f(row, log-probs) for each, rows numbered across windows.
  template <class F>
  void score_window(Engine& engine, int32_t w, F f) {
    ASSERT_GE(tokens_.size(), static_cast<size_t>(kWindow * kWindows));
    RequestParams p;
    p.prompt.assign(tokens_.begin() + w * kWindow, tokens_.begin() + (w + 1) * kWindow);
    if (tok_->vocab().add_bos() && tok_->bos() >= 0) p.prompt[0] = tok_->bos();
    p.score_from = kWindow - 1 - kScored;
    std::vector<double> lp;
    p.score = [&](int32_t position, std::span<const float> logits) {
      log_softmax(logits, lp);
      f(static_cast<size_t>(w * kScored + position - p.score_from), std::span<const double>(lp));
    };
    EXPECT_EQ(test::collect(*engine.submit(p)).error, "");
  }

  std::string name_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  std::vector<RequestParams> prompts_;
  std::vector<int32_t> tokens_;
  size_t n_vocab_ = 0;
  std::vector<float> base_;  // the f32 cache's log-probs, [kWindows * kScored][n_vocab]
  std::vector<test::Output> base_greedy_;
};

// Bounds on the mean KLD from the f32 cache, about twice what each type measured (printed
// by the test; docs/long-context.md has the table): f16 and bf16 round each value (11 and 8
// significant bits), q8_0 and q4_0 each rotated block of 32 to its absmax / 127 and / 8
// steps. Qwen2.5's keys have channels far larger than the rest, which q4_0 cannot hold:
// llama.cpp measures the same KLD, about 1, for -ctk q4_0 on the same file, so that bound
// only catches a cache read wrongly (KLD 5-10).
struct TypeBound {
  DType type;
  double max_kld;
  double min_same_top;
};

void expect_cache_types_match_f32(const std::string& name, std::initializer_list<TypeBound> bounds) {
  FloatMatmuls float_matmuls;
  CacheComparison cmp(name);
  if (!cmp.loaded()) GTEST_SKIP() << name << " is not in the model cache (scripts/fetch-models " << name << ")";
  for (const TypeBound& bound : bounds) {
    SCOPED_TRACE(dtype_name(bound.type));
    const VersusF32 r = cmp.run(bound.type, /*with_greedy=*/bound.type == DType::F16);
    EXPECT_LT(std::fabs(r.mean_kld), bound.max_kld);
    EXPECT_GE(r.same_top, bound.min_same_top);
    if (bound.type != DType::F16) continue;
    for (size_t i = 0; i < r.greedy.size(); ++i) {
      const test::Output& w = cmp.base_greedy()[i];
      ASSERT_EQ(w.tokens.size(), 32u);
      EXPECT_EQ(r.greedy[i].tokens, w.tokens) << name << ", prompt " << i << ": '" << r.greedy[i].text << "' vs '"
                                              << w.text << "'";
    }
  }
}

TEST(KvTypesRealModels, Gemma3_270m) {
  expect_cache_types_match_f32("gemma3-270m", {{DType::F16, 1e-4, 0.99},
                                               {DType::BF16, 1e-4, 0.98},
                                               {DType::Q8_0, 1e-3, 0.97},
                                               {DType::Q4_0, 0.2, 0.8}});
}

TEST(KvTypesRealModels, Qwen2_5Coder0_5b) {
  expect_cache_types_match_f32("qwen2.5-coder-0.5b", {{DType::F16, 1e-4, 0.99},
                                                      {DType::BF16, 1e-3, 0.97},
                                                      {DType::Q8_0, 1.2e-2, 0.9},
                                                      {DType::Q4_0, 2.5, 0.4}});
}

// The prefix cache and preemption in the quantized and bf16 caches: a reused prompt block
// and a recomputed one hold the same rounded rows, so every output is what the request
// gives alone.
TEST(KvTypesRealModels, PrefixReuseAndPreemptionKeepOutputsInEveryType) {
  const std::string path = cached_model("qwen2.5-coder-0.5b");
  if (path.empty()) GTEST_SKIP() << "qwen2.5-coder-0.5b is not in the model cache";
  auto model = Model::load(path, {.n_threads = 2, .max_batch_tokens = 128});
  const Tokenizer tok = Tokenizer::from_gguf(model->file());
  std::string shared = "# Utilities for parsing configuration files.\n";
  for (int i = 0; i < 6; ++i) shared += "def parse_" + std::to_string(i) + "(text):\n    return text.split(',')\n\n";
  const char* const starts[] = {"def main():\n", "class Config:\n", "def load(path):\n", "import os\n"};
  std::vector<RequestParams> requests;  // ~150-token prompts sharing ~130 tokens
  for (const char* start : starts) requests.push_back(greedy_request(tok, shared + start, 8));
  std::vector<RequestParams> growing;  // short prompts, long completions
  for (const char* start : starts) growing.push_back(greedy_request(tok, start, 56));
  for (DType type : {DType::Q8_0, DType::Q4_0}) {
    SCOPED_TRACE(dtype_name(type));
    EngineOptions o;
    o.parallel = 4;
    o.max_batch_tokens = 128;
    o.n_ctx = 512;
    o.kv_type = type;
    o.prefix_cache = false;
    std::vector<test::Output> want, want_growing;  // each request alone
    {
      Engine alone(*model, tok, o);
      alone.start();
      for (const RequestParams& p : requests) want.push_back(test::collect(*alone.submit(p)));
      for (const RequestParams& p : growing) want_growing.push_back(test::collect(*alone.submit(p)));
    }
    // Prefix cache: the first request fills it, the others reuse its shared blocks.
    o.prefix_cache = true;
    {
      Engine engine(*model, tok, o);
      engine.start();
      for (size_t i = 0; i < requests.size(); ++i)
        EXPECT_EQ(test::collect(*engine.submit(requests[i])).tokens, want[i].tokens) << "prefix, request " << i;
      EXPECT_GT(test::wait_until_idle(engine).prefix_cache_hits, 0u);
    }
    // A budget of 12 blocks (192 tokens) for four requests growing to ~60 tokens (4 blocks)
    // each: all four start, then some are preempted and recomputed.
    o.prefix_cache = false;
    o.kv_budget_bytes = 12 * 16 * kv_bytes_per_token(size_engine(*model, o).kv);
    {
      Engine engine(*model, tok, o);
      engine.start();
      std::vector<std::shared_ptr<RequestStream>> streams = engine.submit(growing);
      for (size_t i = 0; i < streams.size(); ++i)
        EXPECT_EQ(test::collect(*streams[i]).tokens, want_growing[i].tokens) << "preemption, request " << i;
      EXPECT_GT(test::wait_until_idle(engine).preemptions_total, 0u);
    }
  }
}

}  // namespace
}  // namespace ridge
