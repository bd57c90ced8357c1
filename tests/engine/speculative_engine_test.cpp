// Speculative decoding in the engine, on stories260K (a tiny real Llama) with n-gram
// lookup and with a draft model (a noisy copy of the same weights, so that it agrees
// often but not always): greedy output is the plain output token for token; sampled
// output has the target's distribution; rejected drafts leave no trace in the KV cache,
// the prefix cache or the draft's cache, through preemption and cancellation too.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "plan/stats.h"

namespace ridge {
namespace {

const std::string kModelPath = std::string(RIDGE_FIXTURES) + "/models/stories260K.gguf";

// stories260K with every weight w scaled by (1 + 0.3 g), g standard normal: same
// vocabulary and shapes, different (worse) predictions.
std::string write_noisy_copy() {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ridge-noisy-stories-" + std::to_string(::getpid()) + ".gguf"))
          .string();
  const gguf::File f = gguf::File::open(kModelPath);
  gguf::Writer w;
  for (const gguf::KeyValue& kv : f.metadata()) w.set(kv.key, kv.value);
  std::mt19937 rng(7);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  for (const gguf::TensorInfo& t : f.tensors()) {
    std::vector<float> values(static_cast<size_t>(t.n_elements()));
    std::memcpy(values.data(), t.data, t.nbytes);
    const bool is_norm = t.name.find("norm") != std::string::npos;
    if (!is_norm)
      for (float& v : values) v *= 1.0f + noise(rng);
    w.add_tensor(t.name, t.dtype, std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                 std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values.data()), t.nbytes));
  }
  w.write(path);
  return path;
}

struct Models {
  std::unique_ptr<Model> target;
  std::unique_ptr<Model> draft;
  std::unique_ptr<Tokenizer> tokenizer;
};

Models& models() {
  static Models m = [] {
    Models x;
    x.target = Model::load(kModelPath, {.n_threads = 2, .max_batch_tokens = 128});
    const std::string noisy = write_noisy_copy();
    x.draft = Model::load(noisy, {.max_batch_tokens = 128, .pool = &x.target->pool()});
    std::filesystem::remove(noisy);  // the mapping keeps the data
    x.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_gguf(x.target->file()));
    return x;
  }();
  return m;
}

using test::collect;
using test::Output;
using test::wait_until_idle;

RequestParams greedy(const std::string& prompt, int32_t max_tokens) {
  RequestParams p;
  p.prompt = models().tokenizer->encode(prompt);
  p.max_tokens = max_tokens;
  p.sampling.temperature = 0;
  p.ignore_eos = true;
  return p;
}

EngineOptions options(int32_t parallel, SpecMethod method, bool adaptive = true, int32_t draft_max = 6) {
  EngineOptions o;
  o.parallel = parallel;
  o.max_batch_tokens = 64;
  o.n_ctx = 512;
  o.prefix_cache = false;
  o.speculative.method = method;
  o.speculative.adaptive = adaptive;
  o.speculative.draft_max = draft_max;
  return o;
}

std::unique_ptr<Engine> engine_for(const EngineOptions& o) {
  Models& m = models();
  auto e = std::make_unique<Engine>(*m.target, *m.tokenizer, o,
                                    o.speculative.method == SpecMethod::kDraftModel ? m.draft.get() : nullptr);
  e->start();
  return e;
}

std::vector<Output> run(Engine& engine, const std::vector<RequestParams>& requests) {
  std::vector<std::shared_ptr<RequestStream>> streams = engine.submit(std::vector<RequestParams>(requests));
  std::vector<Output> outs;
  for (auto& s : streams) outs.push_back(collect(*s));
  return outs;
}

std::vector<RequestParams> story_requests() {
  const std::vector<std::string> prompts = {
      "Once upon a time", "Lily and Ben went to the park. They played with a ball. Lily and Ben",
      "The dog", "Tom had a red ball. Tom had a red ball. Tom had", "One day, a little bird",
      "Sue liked to sing. Every day Sue sang a song. One day Sue"};
  std::vector<RequestParams> out;
  for (size_t i = 0; i < prompts.size(); ++i) out.push_back(greedy(prompts[i], 40 + 13 * static_cast<int32_t>(i)));
  return out;
}


TEST(SpeculativeEngine, GreedyOutputIsThePlainOutputForEveryProposer) {
  const std::vector<RequestParams> requests = story_requests();
  std::vector<Output> plain;
  {
    auto e = engine_for(options(1, SpecMethod::kNone));
    for (const RequestParams& p : requests) plain.push_back(run(*e, {p})[0]);
  }
  struct Case {
    const char* name;
    SpecMethod method;
    bool adaptive;
    int32_t parallel;
  };
  for (const Case& c : {Case{"ngram alone", SpecMethod::kNgram, true, 1}, Case{"ngram fixed, batched", SpecMethod::kNgram, false, 4},
                        Case{"draft alone", SpecMethod::kDraftModel, true, 1},
                        Case{"draft fixed, batched", SpecMethod::kDraftModel, false, 4}}) {
    auto e = engine_for(options(c.parallel, c.method, c.adaptive));
    std::vector<Output> got;
    if (c.parallel == 1) {
      for (const RequestParams& p : requests) got.push_back(run(*e, {p})[0]);
    } else {
      got = run(*e, requests);
    }
    int32_t drafted = 0, accepted = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(got[i].tokens, plain[i].tokens) << c.name << ", request " << i;
      EXPECT_EQ(got[i].text, plain[i].text) << c.name << ", request " << i;
      drafted += got[i].spec_drafted;
      accepted += got[i].spec_accepted;
    }
    // The run really speculated, and was really rejected at times.
    EXPECT_GT(accepted, 0) << c.name;
    EXPECT_GT(drafted, accepted) << c.name;
    const EngineMetrics m = wait_until_idle(*e);
    EXPECT_EQ(m.spec_draft_tokens_total, static_cast<uint64_t>(drafted)) << c.name;
    EXPECT_EQ(m.spec_accepted_tokens_total, static_cast<uint64_t>(accepted)) << c.name;
    EXPECT_EQ(m.kv_blocks_used, 0) << c.name;
    EXPECT_EQ(m.draft_kv_blocks_used, 0) << c.name;
  }
}

TEST(SpeculativeEngine, LogprobsStopStringsAndLengthsAreThoseOfPlainDecoding) {
  std::vector<RequestParams> requests = story_requests();
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].sampling.logprobs = true;
    requests[i].sampling.n_logprobs = 3;
    if (i % 2 == 0) requests[i].stop = {"park", " ball."};
    requests[i].max_tokens = 5 + 7 * static_cast<int32_t>(i);
  }
  auto plain_engine = engine_for(options(4, SpecMethod::kNone));
  const std::vector<Output> plain = run(*plain_engine, requests);
  for (SpecMethod method : {SpecMethod::kNgram, SpecMethod::kDraftModel}) {
    auto e = engine_for(options(4, method, /*adaptive=*/false));
    const std::vector<Output> got = run(*e, requests);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(got[i].tokens, plain[i].tokens) << spec_method_name(method) << " " << i;
      EXPECT_EQ(got[i].text, plain[i].text) << spec_method_name(method) << " " << i;
      EXPECT_EQ(got[i].reason, plain[i].reason) << spec_method_name(method) << " " << i;
      EXPECT_EQ(got[i].logprobs, plain[i].logprobs) << spec_method_name(method) << " " << i;
      ASSERT_EQ(got[i].top_logprobs.size(), plain[i].top_logprobs.size());
      for (size_t t = 0; t < got[i].top_logprobs.size(); ++t) {
        for (size_t k = 0; k < 3; ++k) {
          EXPECT_EQ(got[i].top_logprobs[t][k].token, plain[i].top_logprobs[t][k].token);
          EXPECT_EQ(got[i].top_logprobs[t][k].logprob, plain[i].top_logprobs[t][k].logprob);
        }
      }
    }
  }
}

// The exact probability of each (first, second) generated token pair from a prompt: the
// target's filtered distribution for the first token, and for each first token the one
// for the second.
std::vector<double> exact_pair_distribution(const std::vector<int32_t>& prompt, const SamplingParams& s) {
  Model& model = *models().target;
  const int32_t n_vocab = model.config().n_vocab;
  KvCache cache(model.kv_cache_config(8 << 20, 1, 512));
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  auto logits_after = [&](const std::vector<int32_t>& tokens) {
    cache.add_sequence(0);
    EXPECT_TRUE(cache.reserve(0, static_cast<int32_t>(tokens.size())));
    Batch b;
    b.add_sequence(0, 0, tokens, LogitRows::kLast);
    model.forward(b, cache, logits.data());
    cache.free_sequence(0);
    return logits;
  };
  const std::vector<double> first = filtered_distribution(logits_after(prompt), s, prompt);
  std::vector<double> pairs(static_cast<size_t>(n_vocab) * n_vocab, 0.0);
  for (int32_t t1 = 0; t1 < n_vocab; ++t1) {
    if (first[static_cast<size_t>(t1)] == 0.0) continue;
    std::vector<int32_t> tokens = prompt;
    tokens.push_back(t1);
    const std::vector<double> second = filtered_distribution(logits_after(tokens), s, tokens);
    for (int32_t t2 = 0; t2 < n_vocab; ++t2)
      pairs[static_cast<size_t>(t1) * n_vocab + t2] = first[static_cast<size_t>(t1)] * second[static_cast<size_t>(t2)];
  }
  return pairs;
}

// Counts of (first, second) generated tokens over n requests with seeds 0..n-1. Each
// request may generate 3, so the second token can come from a verified draft.
std::vector<int64_t> pair_counts(Engine& engine, RequestParams p, int n) {
  const int32_t n_vocab = models().target->config().n_vocab;
  std::vector<int64_t> counts(static_cast<size_t>(n_vocab) * n_vocab, 0);
  p.max_tokens = 3;
  for (int start = 0; start < n; start += 32) {
    std::vector<RequestParams> batch;
    for (int i = start; i < std::min(n, start + 32); ++i) {
      batch.push_back(p);
      batch.back().sampling.seed = static_cast<uint64_t>(i);
    }
    for (const Output& o : run(engine, batch)) ++counts[static_cast<size_t>(o.tokens[0]) * n_vocab + o.tokens[1]];
  }
  return counts;
}

TEST(SpeculativeEngine, SampledTokensKeepTheTargetDistribution) {
  // The second generated token is the first one drafts can touch (the first comes from
  // the prompt's step). Its joint distribution with the first, from 8000 seeded
  // requests, against the exact one. The first token after this prompt is nearly always
  // ",", so the test is in effect on the second token's 10 candidates (top-k 10), where
  // 8000 draws reject a 2% total-variation shift: the control below shows it. The
  // prompt repeats itself so that n-gram lookup drafts the second token too.
  RequestParams p = greedy("Once upon a time, there was a big cat. Once upon a time", 3);
  p.sampling.temperature = 1.0f;
  p.sampling.top_k = 10;
  const std::vector<double> exact = exact_pair_distribution(p.prompt, p.sampling);
  constexpr int kDraws = 8000;
  for (SpecMethod method : {SpecMethod::kNgram, SpecMethod::kDraftModel}) {
    EngineOptions o = options(16, method, /*adaptive=*/false, /*draft_max=*/1);
    o.speculative.ngram.min_ngram = 1;
    auto e = engine_for(o);
    const std::vector<int64_t> counts = pair_counts(*e, p, kDraws);
    const plan::ChiSquare c = plan::chi_square_test(counts, exact);
    EXPECT_GT(c.p_value, 1e-4) << spec_method_name(method) << ": chi-square " << c.statistic << " on " << c.dof
                               << " degrees of freedom";
    const EngineMetrics m = wait_until_idle(*e);
    EXPECT_GT(m.spec_draft_tokens_total, static_cast<uint64_t>(kDraws * 9 / 10))
        << spec_method_name(method) << ": nearly every second token went through verification";
    EXPECT_LT(m.spec_accepted_tokens_total + 100, m.spec_draft_tokens_total)
        << spec_method_name(method) << ": and rejections happened";
  }
  // Control: the same test against the distribution at temperature 0.925 (a total-
  // variation shift of 2%) must fail with the plain engine's draws.
  SamplingParams shifted = p.sampling;
  shifted.temperature = 0.925f;
  const std::vector<double> other = exact_pair_distribution(p.prompt, shifted);
  const double tv = plan::total_variation(exact, other);
  EXPECT_NEAR(tv, 0.02, 0.003);
  auto plain = engine_for(options(16, SpecMethod::kNone));
  const plan::ChiSquare control = plan::chi_square_test(pair_counts(*plain, p, kDraws), other);
  EXPECT_LT(control.p_value, 1e-4) << "a " << tv << " total-variation shift went unnoticed";
}

TEST(SpeculativeEngine, RejectedDraftsLeaveTheCachesAsPlainDecodingDoes) {
  // Fixed-length drafts from the noisy model are rejected often. Afterwards the target's
  // cache (blocks held, prefix blocks indexed) must be exactly the plain run's, and a
  // follow-up request must reuse the same number of prompt tokens.
  std::vector<RequestParams> requests = story_requests();
  auto measure = [&](SpecMethod method) {
    EngineOptions o = options(4, method, /*adaptive=*/false);
    o.prefix_cache = true;
    auto e = engine_for(o);
    std::vector<Output> outs = run(*e, requests);
    const EngineMetrics m = wait_until_idle(*e);
    RequestParams follow = requests[1];
    follow.prompt.insert(follow.prompt.end(), outs[1].tokens.begin(), outs[1].tokens.end());
    follow.max_tokens = 4;
    std::shared_ptr<RequestStream> s = e->submit(follow);
    int32_t cached = 0;
    for (StreamEvent ev; s->next(ev);) cached = ev.cached_prompt_tokens;
    return std::tuple(m.kv_blocks_used, m.kv_blocks_cached, m.draft_kv_blocks_used, cached,
                      m.spec_draft_tokens_total - m.spec_accepted_tokens_total);
  };
  const auto [used, cached_blocks, draft_used, reused, rejected] = measure(SpecMethod::kNone);
  const auto [s_used, s_cached_blocks, s_draft_used, s_reused, s_rejected] = measure(SpecMethod::kDraftModel);
  EXPECT_EQ(s_used, used);
  EXPECT_EQ(s_used, 0);
  EXPECT_EQ(s_draft_used, 0);
  EXPECT_EQ(s_cached_blocks, cached_blocks);
  EXPECT_EQ(s_reused, reused);
  EXPECT_GT(reused, 0);
  EXPECT_GT(s_rejected, 50u) << "the run should have rejected many drafts";
}

TEST(SpeculativeEngine, PreemptedAndCancelledRequestsFreeTheirDraftBlocks) {
  // A KV budget for ~2 contexts among 6 requests: sequences are preempted and recomputed.
  const std::vector<RequestParams> requests = story_requests();
  auto plain_engine = engine_for(options(1, SpecMethod::kNone));
  std::vector<Output> plain;
  for (const RequestParams& p : requests) plain.push_back(run(*plain_engine, {p})[0]);
  EngineOptions o = options(6, SpecMethod::kDraftModel, /*adaptive=*/false);
  o.kv_budget_bytes = 160 * models().target->config().n_layer * 2 * 4 * 8 * sizeof(uint16_t);  // 160 f16 tokens
  auto e = engine_for(o);
  const std::vector<Output> got = run(*e, requests);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(got[i].tokens, plain[i].tokens) << "request " << i;
  EngineMetrics m = wait_until_idle(*e);
  EXPECT_GT(m.preemptions_total, 0u);
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.draft_kv_blocks_used, 0);

  // Cancelled mid-stream while speculating.
  RequestParams p = greedy("Once upon a time", 150);
  std::shared_ptr<RequestStream> s = e->submit(p);
  StreamEvent ev;
  for (int i = 0; i < 5 && s->next(ev); ++i) {
  }
  EXPECT_GT(e->metrics().draft_kv_blocks_used, 0);
  s->cancel();
  while (s->next(ev)) {
  }
  EXPECT_EQ(ev.finish_reason, FinishReason::kCancelled);
  m = wait_until_idle(*e);
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.draft_kv_blocks_used, 0);
}

TEST(SpeculativeEngine, RefusesADraftWithAnotherVocabularyOrNoDraft) {
  Models& m = models();
  EXPECT_THROW(Engine(*m.target, *m.tokenizer, options(1, SpecMethod::kDraftModel), nullptr), Error);
  EngineOptions bad = options(1, SpecMethod::kNgram);
  bad.speculative.draft_max = 0;
  EXPECT_THROW(Engine(*m.target, *m.tokenizer, bad), Error);
  // A draft whose token 300 is spelled differently: same size, different vocabulary.
  const gguf::File f = gguf::File::open(kModelPath);
  gguf::Writer w;
  for (const gguf::KeyValue& kv : f.metadata()) {
    if (kv.key != "tokenizer.ggml.tokens") {
      w.set(kv.key, kv.value);
      continue;
    }
    Tokenizer& t = *m.tokenizer;
    std::vector<std::string> tokens;
    for (int32_t id = 0; id < t.n_vocab(); ++id) tokens.emplace_back(t.vocab().text(id));
    tokens[300] = "renamed";
    w.set_string_array(kv.key, tokens);
  }
  for (const gguf::TensorInfo& t : f.tensors())
    w.add_tensor(t.name, t.dtype, std::vector<int64_t>(t.ne, t.ne + t.n_dims), std::span<const uint8_t>(t.data, t.nbytes));
  const std::string path = (std::filesystem::temp_directory_path() / "ridge-renamed-token.gguf").string();
  w.write(path);
  auto draft = Model::load(path, {.max_batch_tokens = 128, .pool = &m.target->pool()});
  std::filesystem::remove(path);
  try {
    Engine e(*m.target, *m.tokenizer, options(1, SpecMethod::kDraftModel), draft.get());
    FAIL() << "a draft with another vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 300"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("renamed"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ridge
