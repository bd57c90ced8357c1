// The engine end to end on stories260K (a tiny real Llama): batching, preemption and
// prefix caching never change a request's output; cancellation returns blocks; stop
// strings, max_tokens, seeds, logprobs, metrics and submit errors behave as documented.
#include "engine/engine.h"
#include "engine_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/request_output.h"
#include "engine/stop_strings.h"
#include "gguf/gguf.h"

namespace ridge {
namespace {

using test::stories;

using test::collect;
using test::Output;
using test::wait_until_idle;

std::vector<int32_t> encode(const std::string& text) { return stories().tokenizer->encode(text); }

RequestParams greedy(const std::string& prompt, int32_t max_tokens, bool ignore_eos = true) {
  RequestParams p;
  p.prompt = encode(prompt);
  p.max_tokens = max_tokens;
  p.sampling.temperature = 0;
  p.ignore_eos = ignore_eos;
  return p;
}

EngineOptions options(int32_t parallel, int32_t max_batch_tokens = 64) {
  EngineOptions o;
  o.parallel = parallel;
  o.max_batch_tokens = max_batch_tokens;
  o.n_ctx = 512;
  o.prefix_cache = false;
  return o;
}

// Each request run on an engine of its own, one at a time: the reference outputs.
std::vector<Output> run_alone(const std::vector<RequestParams>& requests) {
  Engine engine(*stories().model, *stories().tokenizer, options(1));
  engine.start();
  std::vector<Output> outs;
  for (const RequestParams& p : requests) outs.push_back(collect(*engine.submit(p)));
  return outs;
}

std::vector<Output> run_together(Engine& engine, const std::vector<RequestParams>& requests) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const RequestParams& p : requests) streams.push_back(engine.submit(p));
  std::vector<Output> outs;
  for (auto& s : streams) outs.push_back(collect(*s));
  return outs;
}

// 16 prompts from 2 to ~150 tokens, with 4..60 tokens to generate.
std::vector<RequestParams> mixed_requests() {
  const std::vector<std::string> starts = {
      "Once upon a time", "The dog", "Lily and Ben went to the park.", "Tom had a red ball",
      "One day, a little bird", "Sue", "The sun was hot and the sky was blue.", "Mom said",
  };
  std::vector<RequestParams> out;
  for (int i = 0; i < 16; ++i) {
    std::string prompt = starts[static_cast<size_t>(i) % starts.size()];
    for (int r = 0; r < i % 5; ++r) prompt += " " + starts[static_cast<size_t>(i + r + 1) % starts.size()];
    if (i == 7 || i == 12) {
      for (int r = 0; r < 12; ++r) prompt += " They played all day and were happy.";
    }
    out.push_back(greedy(prompt, 4 + (i * 7) % 57));
  }
  return out;
}

void expect_same_tokens(const std::vector<Output>& got, const std::vector<Output>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].text, want[i].text) << "request " << i;
    EXPECT_EQ(got[i].reason, want[i].reason) << "request " << i;
  }
}


// llama2.c's run.c on the same weights: BOS + "Once upon a time", then 60 greedy tokens.
std::vector<int32_t> llama2c_greedy_sequence() {
  std::ifstream in(std::string(RIDGE_FIXTURES) + "/models/stories260K.greedy-ref.txt");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("sequence:", 0) != 0) continue;
    std::istringstream ss(line.substr(9));
    std::vector<int32_t> ids;
    for (int32_t id; ss >> id;) ids.push_back(id);
    return ids;
  }
  return {};
}

TEST(Engine, GreedyOutputReproducesLlama2c) {
  const std::vector<int32_t> want = llama2c_greedy_sequence();
  ASSERT_EQ(want.size(), 65u);
  RequestParams p = greedy("Once upon a time", 60);
  ASSERT_EQ(p.prompt, std::vector<int32_t>(want.begin(), want.begin() + 5));
  const Output alone = run_alone({p})[0];
  EXPECT_EQ(alone.tokens, std::vector<int32_t>(want.begin() + 5, want.end()));
  EXPECT_EQ(alone.completion_tokens, 60);
  EXPECT_EQ(alone.reason, FinishReason::kLength);
}

TEST(Engine, SixteenConcurrentRequestsMatchTheirOutputsAlone) {
  const std::vector<RequestParams> requests = mixed_requests();
  const std::vector<Output> want = run_alone(requests);
  Engine engine(*stories().model, *stories().tokenizer, options(8, 64));
  engine.start();
  const std::vector<Output> got = run_together(engine, requests);
  expect_same_tokens(got, want);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].completion_tokens, requests[i].max_tokens);
    EXPECT_EQ(got[i].reason, FinishReason::kLength);
  }
  const EngineMetrics m = wait_until_idle(engine);
  EXPECT_EQ(m.requests_finished_total, 16u);
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.preemptions_total, 0u);
  uint64_t generated = 0, prompt = 0;
  for (const RequestParams& p : requests) {
    generated += static_cast<uint64_t>(p.max_tokens);
    prompt += p.prompt.size();
  }
  EXPECT_EQ(m.generation_tokens_total, generated);
  EXPECT_EQ(m.prompt_tokens_total, prompt);
  // Histograms: one TTFT per request, one inter-token gap per later token; cumulative.
  EXPECT_EQ(m.ttft_count, 16u);
  EXPECT_EQ(m.itl_count, generated - 16);
  ASSERT_EQ(m.ttft_counts.size(), m.latency_buckets.size());
  EXPECT_TRUE(std::is_sorted(m.ttft_counts.begin(), m.ttft_counts.end()));
  EXPECT_TRUE(std::is_sorted(m.itl_counts.begin(), m.itl_counts.end()));
  EXPECT_LE(m.ttft_counts.back(), m.ttft_count);
  EXPECT_EQ(m.latency_buckets.front(), 0.005);
  EXPECT_EQ(m.latency_buckets.back(), 60.0);
  EXPECT_GT(m.ttft_sum, 0.0);
}

TEST(Engine, PreemptionUnderATightKvBudgetKeepsEveryOutput) {
  std::vector<RequestParams> requests = mixed_requests();
  requests.resize(8);
  for (RequestParams& p : requests) p.max_tokens = 60;
  const std::vector<Output> want = run_alone(requests);
  // stories260K: 5 layers x 2 x 4 KV heads x 8 x 2 bytes (f16) = 640 bytes a token, 10 KiB
  // a 16-token block. 16 blocks (256 tokens) cannot hold 8 requests of ~70-100 tokens.
  EngineOptions o = options(8, 64);
  o.kv_budget_bytes = 16 * 10240;
  Engine engine(*stories().model, *stories().tokenizer, o);
  engine.start();
  const std::vector<Output> got = run_together(engine, requests);
  expect_same_tokens(got, want);
  const EngineMetrics m = wait_until_idle(engine);
  EXPECT_EQ(m.kv_blocks_total, 16);
  EXPECT_GT(m.preemptions_total, 0u);
  EXPECT_EQ(m.kv_blocks_used, 0);
}

TEST(Engine, PrefixCacheHitKeepsTheOutput) {
  std::string story;
  for (int r = 0; r < 10; ++r) story += " Lily and Ben went to the park. They played all day.";
  RequestParams first = greedy(story + " Then", 20);
  RequestParams second = greedy(story + " The dog said", 20);
  const std::vector<Output> want = run_alone({first, second});

  EngineOptions o = options(4, 64);
  o.prefix_cache = true;
  Engine engine(*stories().model, *stories().tokenizer, o);
  engine.start();
  const Output a = collect(*engine.submit(first));
  const EngineMetrics before = wait_until_idle(engine);
  EXPECT_EQ(before.prefix_cache_hits, 0u);
  EXPECT_GT(before.kv_blocks_cached, 0);
  const Output b = collect(*engine.submit(second));
  EXPECT_EQ(a.tokens, want[0].tokens);
  EXPECT_EQ(b.tokens, want[1].tokens);
  EXPECT_EQ(b.text, want[1].text);
  EXPECT_EQ(a.cached_prompt_tokens, 0);
  // The shared prefix is at least the story's full 16-token blocks but the last.
  const int32_t common = static_cast<int32_t>(std::mismatch(first.prompt.begin(), first.prompt.end(),
                                                            second.prompt.begin()).first -
                                              first.prompt.begin());
  EXPECT_GE(common, 100);
  EXPECT_EQ(b.cached_prompt_tokens, common / 16 * 16);
  const EngineMetrics after = wait_until_idle(engine);
  EXPECT_EQ(after.prefix_cache_hits, static_cast<uint64_t>(common / 16));
  EXPECT_GT(after.prefix_cache_queries, after.prefix_cache_hits);
}

TEST(Engine, ARequestIsCountedFromSubmitUntilItsEnd) {
  // The gauges never lose a request between the queue and the running batch: a client
  // that has its first token sees it running or waiting (the server's tests and load
  // balancers read these).
  Engine engine(*stories().model, *stories().tokenizer, options(2));
  engine.start();
  int checked = 0;
  for (int i = 0; i < 1000; ++i) {
    std::shared_ptr<RequestStream> s = engine.submit(greedy("Once upon a time", 400));
    StreamEvent ev;
    ASSERT_TRUE(s->next(ev));
    ASSERT_FALSE(ev.finished);
    const EngineMetrics m = engine.metrics();
    s->cancel();
    // Cancelled (not finished at its length) means it was still live when the metrics
    // were read. On a loaded machine this thread can sleep through all 400 tokens;
    // those iterations prove nothing either way.
    if (collect(*s).reason != FinishReason::kCancelled) continue;
    ++checked;
    ASSERT_EQ(m.requests_running + m.requests_waiting, 1) << "iteration " << i;
  }
  EXPECT_GE(checked, 500);
}

TEST(Engine, CancellingMidStreamReturnsItsBlocks) {
  Engine engine(*stories().model, *stories().tokenizer, options(2));
  engine.start();
  std::shared_ptr<RequestStream> s = engine.submit(greedy("Once upon a time", 400));
  StreamEvent ev;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(s->next(ev));
    ASSERT_FALSE(ev.finished);
  }
  EXPECT_GT(engine.metrics().kv_blocks_used, 0);
  s->cancel();
  EXPECT_TRUE(s->cancelled());
  const Output rest = collect(*s);
  EXPECT_EQ(rest.reason, FinishReason::kCancelled);
  EXPECT_LT(rest.completion_tokens, 400);
  const EngineMetrics m = wait_until_idle(engine);
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.requests_running, 0);
  EXPECT_EQ(m.requests_finished_total, 1u);
  EXPECT_FALSE(s->next(ev));  // the finished event was read
}

TEST(Engine, StopStringEndsGenerationAndIsNotEmitted) {
  const Output full = run_alone({greedy("Once upon a time", 60)})[0];
  // Pick a stop string from the middle of the reference text.
  const size_t at = full.text.find(' ', full.text.size() / 2);
  ASSERT_NE(at, std::string::npos);
  const std::string stop = full.text.substr(at, 4);
  const size_t first = full.text.find(stop);
  RequestParams p = greedy("Once upon a time", 60);
  p.stop = {"never appears \x01", stop};
  Engine engine(*stories().model, *stories().tokenizer, options(2));
  engine.start();
  const Output out = collect(*engine.submit(p));
  EXPECT_EQ(out.reason, FinishReason::kStop);
  EXPECT_EQ(out.text, full.text.substr(0, first));
  EXPECT_LT(out.completion_tokens, 60);
  // Without a match the whole text arrives, held-back parts included.
  RequestParams q = greedy("Once upon a time", 60);
  q.stop = {full.text.substr(full.text.size() - 3) + "zzz"};
  const Output unmatched = collect(*engine.submit(q));
  EXPECT_EQ(unmatched.text, full.text);
  EXPECT_EQ(unmatched.reason, FinishReason::kLength);
}

TEST(Engine, MaxTokensEndsWithLength) {
  Engine engine(*stories().model, *stories().tokenizer, options(2));
  engine.start();
  const Output out = collect(*engine.submit(greedy("The dog", 7)));
  EXPECT_EQ(out.completion_tokens, 7);
  EXPECT_EQ(out.tokens.size(), 7u);
  EXPECT_EQ(out.reason, FinishReason::kLength);
  EXPECT_EQ(out.n_events, 7);  // one event per token, the last one finished
}

// Model-free: the text side of a request. (stories260K ends a story with BOS, which is
// not an end-of-generation token, so a generated EOS is fed here by hand.)
TEST(RequestOutput, EndOfGenerationStopsUnlessIgnored) {
  const Tokenizer& tok = *stories().tokenizer;
  const int32_t eos = tok.eos();
  ASSERT_TRUE(tok.is_end_of_generation(eos));
  const std::vector<int32_t> words = encode("The dog ran");
  std::string text;
  RequestOutput out(tok, {}, /*ignore_eos=*/false, 10);
  for (size_t i = 1; i < words.size(); ++i) EXPECT_EQ(out.push(words[i], text), FinishReason::kNone);
  EXPECT_EQ(out.push(eos, text), FinishReason::kStop);
  EXPECT_EQ(text, " The dog ran");  // piece text as streamed (leading dummy-prefix space)
  EXPECT_EQ(out.n_generated(), static_cast<int32_t>(words.size()));

  std::string ignored;
  RequestOutput go_on(tok, {}, /*ignore_eos=*/true, 10);
  EXPECT_EQ(go_on.push(eos, ignored), FinishReason::kNone);
  EXPECT_EQ(go_on.push(words[1], ignored), FinishReason::kNone);
  EXPECT_EQ(ignored, " The");
}

TEST(RequestOutput, MaxTokensReleasesHeldBackText) {
  const Tokenizer& tok = *stories().tokenizer;
  const std::vector<int32_t> words = encode("The dog");  // BOS, then " The dog" in pieces
  const auto n = static_cast<int32_t>(words.size()) - 1;
  ASSERT_GE(n, 2);
  std::string text;
  RequestOutput out(tok, {" The dog is"}, false, n);
  for (int32_t i = 1; i < n; ++i) {
    EXPECT_EQ(out.push(words[static_cast<size_t>(i)], text), FinishReason::kNone);
    EXPECT_EQ(text, "");  // all of it may still start the stop string
  }
  EXPECT_EQ(out.push(words.back(), text), FinishReason::kLength);
  EXPECT_EQ(text, " The dog");
}

TEST(StopMatcher, HoldsBackPossibleStartsAndCutsAtTheFirstMatch) {
  StopMatcher m({"abc", "bd", ""});
  std::string out;
  EXPECT_FALSE(m.push("xxa", out));
  EXPECT_EQ(out, "xx");  // "a" may start "abc"
  EXPECT_FALSE(m.push("b", out));
  EXPECT_EQ(out, "xx");  // "ab" may start "abc", "b" may start "bd"
  EXPECT_FALSE(m.push("x", out));
  EXPECT_EQ(out, "xxabx");
  EXPECT_TRUE(m.push("yyabdzz", out));  // "bd" completes first (at "b" of "abd")
  EXPECT_EQ(out, "xxabxyya");
  EXPECT_TRUE(m.stopped());
  EXPECT_TRUE(m.push("more", out));
  m.flush(out);
  EXPECT_EQ(out, "xxabxyya");

  StopMatcher tail({"\n\n"});
  std::string t;
  EXPECT_FALSE(tail.push("end\n", t));
  EXPECT_EQ(t, "end");
  tail.flush(t);
  EXPECT_EQ(t, "end\n");

  StopMatcher none;
  std::string n;
  EXPECT_FALSE(none.push("anything", n));
  EXPECT_EQ(n, "anything");
}

TEST(Engine, SameSeedSameSampledOutputAloneOrBatched) {
  auto sampled = [](const std::string& prompt, uint64_t seed) {
    RequestParams p = greedy(prompt, 40);
    p.sampling.temperature = 1.0f;
    p.sampling.top_p = 0.95f;
    p.sampling.seed = seed;
    return p;
  };
  const RequestParams target = sampled("Once upon a time", 42);
  const Output alone = run_alone({target})[0];
  std::vector<RequestParams> batch;
  for (int i = 0; i < 7; ++i) batch.push_back(sampled(i % 2 ? "The dog" : "Once upon a time", 100 + i));
  batch.insert(batch.begin() + 3, target);
  Engine engine(*stories().model, *stories().tokenizer, options(8, 32));
  engine.start();
  const std::vector<Output> got = run_together(engine, batch);
  EXPECT_EQ(got[3].tokens, alone.tokens);
  EXPECT_EQ(got[3].text, alone.text);
  // A different seed on the same prompt samples something else.
  EXPECT_NE(got[0].tokens, alone.tokens);
}

TEST(Engine, LogprobsOfGreedyTokensAreTheTopAlternatives) {
  RequestParams p = greedy("Lily and Ben", 10);
  p.sampling.logprobs = true;
  p.sampling.n_logprobs = 3;
  Engine engine(*stories().model, *stories().tokenizer, options(2));
  engine.start();
  const Output out = collect(*engine.submit(p));
  ASSERT_EQ(out.logprobs.size(), 10u);
  ASSERT_EQ(out.top_logprobs.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    ASSERT_EQ(out.top_logprobs[i].size(), 3u);
    EXPECT_EQ(out.top_logprobs[i][0].token, out.tokens[i]);
    EXPECT_FLOAT_EQ(out.top_logprobs[i][0].logprob, out.logprobs[i]);
    EXPECT_LE(out.logprobs[i], 0.0f);
  }
}

int status_of(Engine& engine, RequestParams p) {
  try {
    engine.submit(std::move(p));
  } catch (const EngineError& e) {
    return e.status;
  }
  return 200;
}

TEST(Engine, SubmitRejectsBadRequestsWithAStatus) {
  EngineOptions o = options(2);
  o.max_queue = 2;
  Engine engine(*stories().model, *stories().tokenizer, o);  // not started: requests queue
  RequestParams empty = greedy("", 4);
  empty.prompt.clear();
  EXPECT_EQ(status_of(engine, empty), 400);
  EXPECT_EQ(status_of(engine, greedy("Once upon a time", 600)), 400);  // past n_ctx 512
  RequestParams long_prompt = greedy("x", 4);
  long_prompt.prompt.assign(512, 1);
  EXPECT_EQ(status_of(engine, long_prompt), 400);
  RequestParams bad_token = greedy("The dog", 4);
  bad_token.prompt[1] = 512;
  EXPECT_EQ(status_of(engine, bad_token), 400);
  RequestParams bad_sampling = greedy("The dog", 4);
  bad_sampling.sampling.top_p = 2.0f;
  EXPECT_EQ(status_of(engine, bad_sampling), 400);
  RequestParams bad_stop = greedy("The dog", 4);
  bad_stop.stop = {""};
  EXPECT_EQ(status_of(engine, bad_stop), 400);
  RequestParams negative = greedy("The dog", -1);
  EXPECT_EQ(status_of(engine, negative), 400);
  try {
    engine.submit(empty);
  } catch (const EngineError& e) {
    EXPECT_NE(std::string(e.what()).find("prompt"), std::string::npos) << e.what();
  }

  std::shared_ptr<RequestStream> a = engine.submit(greedy("The dog", 4));
  std::shared_ptr<RequestStream> b = engine.submit(greedy("The dog", 4));
  EXPECT_EQ(status_of(engine, greedy("The dog", 4)), 429);
  EXPECT_EQ(engine.metrics().requests_waiting, 2);
  engine.stop();
  EXPECT_EQ(status_of(engine, greedy("The dog", 4)), 503);
  EXPECT_EQ(collect(*a).reason, FinishReason::kCancelled);
  EXPECT_EQ(collect(*b).reason, FinishReason::kCancelled);
}

TEST(Engine, ZeroMaxTokensMeansUpToTheContext) {
  EngineOptions o = options(1);
  o.n_ctx = 64;
  Engine engine(*stories().model, *stories().tokenizer, o);
  engine.start();
  RequestParams p = greedy("Once upon a time", 0);
  const Output out = collect(*engine.submit(p));
  EXPECT_EQ(out.completion_tokens, 64 - static_cast<int32_t>(p.prompt.size()));
  EXPECT_EQ(out.reason, FinishReason::kLength);
}

TEST(Engine, StopCancelsRunningRequests) {
  Engine engine(*stories().model, *stories().tokenizer, options(2));
  engine.start();
  std::shared_ptr<RequestStream> s = engine.submit(greedy("Once upon a time", 400));
  StreamEvent ev;
  ASSERT_TRUE(s->next(ev));
  engine.stop();
  const Output rest = collect(*s);
  EXPECT_EQ(rest.reason, FinishReason::kCancelled);
}

// A scoring request (ridge perplexity's) gets the logits of every position it scores even
// when the prefix cache holds its prompt: cached blocks are not used for it.
TEST(Engine, ScoringIgnoresThePrefixCache) {
  std::string story;
  for (int r = 0; r < 6; ++r) story += " Lily and Ben went to the park. They played all day.";
  EngineOptions o = options(2, 64);
  o.prefix_cache = true;
  Engine engine(*stories().model, *stories().tokenizer, o);
  engine.start();
  RequestParams warm = greedy(story, 1);
  const size_t n_prompt = warm.prompt.size();
  collect(*engine.submit(warm));  // fills the prefix cache with the story's blocks
  RequestParams scoring = greedy(story, 1);
  scoring.score_from = 0;
  std::vector<int32_t> scored;
  scoring.score = [&](int32_t position, std::span<const float>) { scored.push_back(position); };
  EXPECT_EQ(collect(*engine.submit(scoring)).error, "");
  ASSERT_EQ(scored.size(), n_prompt - 1);
  for (size_t i = 0; i < scored.size(); ++i) EXPECT_EQ(scored[i], static_cast<int32_t>(i));
}

TEST(Engine, RejectsOptionsItCannotServe) {
  EngineOptions o = options(4, 256);  // the model was loaded for batches of 128
  EXPECT_THROW(Engine(*stories().model, *stories().tokenizer, o), Error);
  o = options(8, 4);  // fewer tokens per step than running sequences
  EXPECT_THROW(Engine(*stories().model, *stories().tokenizer, o), Error);
  o = options(8);
  o.n_ctx = 4;  // a context shorter than a step of 8 sequences: said so, not in the scheduler's words
  try {
    Engine(*stories().model, *stories().tokenizer, o);
    ADD_FAILURE() << "a context of 4 for 8 sequences was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a context of 4 tokens is shorter than the 8 sequences one step runs"),
              std::string::npos)
        << e.what();
  }
  o = options(1);
  o.kv_type = DType::Q4_K;  // not a KV cache type
  try {
    Engine(*stories().model, *stories().tokenizer, o);
    ADD_FAILURE() << "a q4_K KV cache was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV cache type q4_K is not supported (f32, f16, bf16, q8_0 or q4_0)"),
              std::string::npos)
        << e.what();
  }
  o.kv_type = DType::Q8_0;  // a cache type, but stories260K's heads of 8 values do not fill its blocks
  try {
    Engine(*stories().model, *stories().tokenizer, o);
    ADD_FAILURE() << "a q8_0 KV cache was accepted for heads of 8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head size 8 is not a multiple of q8_0's block of 32 values"),
              std::string::npos)
        << e.what();
  }
}

TEST(Engine, SizingUsesTheKvTypesBytesPerToken) {
  EngineOptions o = options(3);
  EXPECT_EQ(o.kv_type, DType::F16);  // the default, as llama.cpp's
  const EngineSizing half = size_engine(*stories().model, o);
  o.kv_type = DType::F32;
  const EngineSizing full = size_engine(*stories().model, o);
  EXPECT_EQ(half.kv.dtype, DType::F16);
  EXPECT_EQ(full.kv.dtype, DType::F32);
  // stories260K: 5 layers x 2 x 4 KV heads x 8 = 320 values a token; the default budget is
  // 3 contexts of 512 tokens plus a partly filled block each.
  EXPECT_EQ(kv_bytes_per_token(half.kv), 640u);
  EXPECT_EQ(kv_bytes_per_token(full.kv), 1280u);
  EXPECT_EQ(half.kv.budget_bytes, 640u * (512 + 16) * 3);
  EXPECT_EQ(full.kv.budget_bytes, 2 * half.kv.budget_bytes);
  // A fixed budget holds twice the tokens in f16.
  o.kv_budget_bytes = 16 * 20480;
  o.kv_type = DType::F16;
  Engine f16(*stories().model, *stories().tokenizer, o);
  o.kv_type = DType::F32;
  Engine f32(*stories().model, *stories().tokenizer, o);
  EXPECT_EQ(f16.metrics().kv_blocks_total, 32);
  EXPECT_EQ(f32.metrics().kv_blocks_total, 16);
  EXPECT_NE(f16.kv_summary().find("(f16)"), std::string::npos) << f16.kv_summary();
  EXPECT_NE(f32.kv_summary().find("1.2 KiB/token"), std::string::npos) << f32.kv_summary();
  // What the same budget would hold in each type; stories260K's heads of 8 cannot be q8_0/q4_0.
  EXPECT_EQ(f16.kv_budget_by_type(),
            "kv budget: 0.3 MiB holds 512 tokens as f16 (the same budget as f32 256, bf16 512, q8_0 n/a, q4_0 n/a)");
}

// The f32 cache gives llama2.c's greedy tokens (checked above with the default f16 cache)
// as well: both element types run the same forward.
TEST(Engine, GreedyOutputWithAnF32CacheReproducesLlama2c) {
  const std::vector<int32_t> want = llama2c_greedy_sequence();
  EngineOptions o = options(1);
  o.kv_type = DType::F32;
  Engine engine(*stories().model, *stories().tokenizer, o);
  engine.start();
  const Output out = collect(*engine.submit(greedy("Once upon a time", 60)));
  EXPECT_EQ(out.tokens, std::vector<int32_t>(want.begin() + 5, want.end()));
}

// A vocabulary shorter than the embedding (Qwen2.5 pads its 151665 tokens to 151936 rows):
// the padding rows have no text and must never be sampled, even near-uniformly at a high
// temperature; sampling one used to fail every request in the step.
TEST(Engine, EmbeddingRowsPastTheVocabularyAreNeverSampled) {
  const Vocab& full = stories().tokenizer->vocab();
  VocabSpec spec;
  const int32_t n_text = full.n_tokens() - 12;
  for (int32_t i = 0; i < n_text; ++i) {
    const TokenData t = full.token(i);
    spec.tokens.emplace_back(t.text);
    spec.scores.push_back(t.score);
    spec.types.push_back(t.type);
  }
  spec.bos_id = full.bos();
  spec.eos_id = full.eos();
  spec.add_bos = full.add_bos();
  const Tokenizer short_vocab(Vocab::from_spec(std::move(spec)));
  Engine engine(*stories().model, short_vocab, options(4));
  engine.start();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    RequestParams p;
    p.prompt = short_vocab.encode("Once upon a time");
    p.max_tokens = 200;
    p.sampling.temperature = 100;  // close to uniform over all 512 rows
    p.sampling.seed = static_cast<uint64_t>(i);
    p.ignore_eos = true;
    streams.push_back(engine.submit(p));
  }
  for (auto& s : streams) {
    const Output out = collect(*s);
    EXPECT_EQ(out.reason, FinishReason::kLength) << out.error;
    EXPECT_EQ(out.tokens.size(), 200u);
    for (int32_t t : out.tokens) EXPECT_LT(t, n_text);
  }
}

}  // namespace
}  // namespace ridge
