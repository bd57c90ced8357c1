#include "engine/sampler.h"
#include "plan/stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

#include "../allocation_counter.h"

namespace ridge {
namespace {

// Regularized upper incomplete gamma Q(a, x): the chi-square survival function is
// Q(df / 2, chi2 / 2). Series for x < a + 1, continued fraction (modified Lentz) beyond.
// The chi-square survival function the simulator uses (plan/stats.h): one implementation.
double upper_gamma_q(double a, double x) { return plan::upper_incomplete_gamma_q(a, x); }

TEST(ChiSquare, SurvivalFunctionMatchesKnownValues) {
  // Critical values from the chi-square table: P(X > x) for df degrees of freedom.
  EXPECT_NEAR(upper_gamma_q(1 / 2.0, 3.841 / 2), 0.05, 1e-4);
  EXPECT_NEAR(upper_gamma_q(5 / 2.0, 11.070 / 2), 0.05, 1e-4);
  EXPECT_NEAR(upper_gamma_q(10 / 2.0, 23.209 / 2), 0.01, 1e-4);
  EXPECT_NEAR(upper_gamma_q(19 / 2.0, 43.820 / 2), 0.001, 1e-5);
  EXPECT_NEAR(upper_gamma_q(2 / 2.0, 4.0 / 2), std::exp(-2.0), 1e-12);  // df 2: exp(-x/2)
}

std::vector<float> sample_logits() {
  return {2.0f, 1.5f, 1.2f, 1.0f, 0.8f, 0.5f, 0.3f, 0.0f, -0.5f, -1.0f, -2.0f, 0.9f};
}

std::vector<float> random_logits(int n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> logits(static_cast<size_t>(n));
  for (float& l : logits) l = normal(rng);
  return logits;
}

// Draws n samples (a fresh copy of the logits each time: sample() penalises in place).
std::vector<int> histogram(const std::vector<float>& logits, const SamplingParams& params,
                           const std::vector<int32_t>& history, int n) {
  Sampler sampler(params);
  std::vector<int> counts(logits.size(), 0);
  std::vector<float> work(logits.size());
  for (int i = 0; i < n; ++i) {
    work = logits;
    ++counts[static_cast<size_t>(sampler.sample(work, history))];
  }
  return counts;
}

// p-value of the chi-square test of counts against expected probabilities, with the
// categories merged into `bins` consecutive groups of the support (ids in order).
// Fails the test if a token with probability 0 was drawn.
double chi_square_p(const std::vector<int>& counts, const std::vector<double>& expected,
                    int bins = 0) {
  std::vector<size_t> support;
  int total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    total += counts[i];
    if (expected[i] > 0.0) {
      support.push_back(i);
    } else {
      EXPECT_EQ(counts[i], 0) << "token " << i << " was filtered but drawn";
    }
  }
  if (bins == 0) bins = static_cast<int>(support.size());
  double chi2 = 0.0;
  for (int b = 0; b < bins; ++b) {
    double observed = 0.0, probability = 0.0;
    for (size_t k = support.size() * b / bins; k < support.size() * (b + 1) / bins; ++k) {
      observed += counts[support[k]];
      probability += expected[support[k]];
    }
    const double e = probability * total;
    chi2 += (observed - e) * (observed - e) / e;
  }
  return upper_gamma_q((bins - 1) / 2.0, chi2 / 2.0);
}

struct ChiSquareCase {
  const char* name;
  SamplingParams params;
  std::vector<int32_t> history;
};

SamplingParams make(float temperature, int top_k, float top_p, float min_p, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = seed;
  return p;
}

TEST(Sampler, EmpiricalDistributionMatchesTheFilteredOne) {
  SamplingParams penalised = make(1.0f, 0, 1.0f, 0.0f, 7);
  penalised.repetition_penalty = 1.3f;
  penalised.presence_penalty = 0.2f;
  penalised.frequency_penalty = 0.1f;
  const std::vector<ChiSquareCase> cases = {
      {"temperature 1", make(1.0f, 0, 1.0f, 0.0f, 1), {}},
      {"temperature 0.6", make(0.6f, 0, 1.0f, 0.0f, 2), {}},
      {"top_k 5, temperature 1.7", make(1.7f, 5, 1.0f, 0.0f, 3), {}},
      {"top_p 0.8", make(1.0f, 0, 0.8f, 0.0f, 4), {}},
      {"min_p 0.2, temperature 1.3", make(1.3f, 0, 1.0f, 0.2f, 5), {}},
      {"top_k 8, top_p 0.9, min_p 0.05, temperature 0.8", make(0.8f, 8, 0.9f, 0.05f, 6), {}},
      {"penalties", penalised, {0, 0, 3, 7, 11}},
  };
  const std::vector<float> logits = sample_logits();
  for (const ChiSquareCase& c : cases) {
    const std::vector<double> expected = filtered_distribution(logits, c.params, c.history);
    const std::vector<int> counts = histogram(logits, c.params, c.history, 100000);
    const double p = chi_square_p(counts, expected);
    EXPECT_GT(p, 1e-3) << c.name;
  }
}

TEST(Sampler, DistributionIsTheFilteredOneTheSamplerDrawsFrom) {
  // Speculative verification judges drafts by Sampler::distribution: it must be the
  // reference chain's distribution (to float rounding) for every setting, greedy included.
  SamplingParams penalised = make(0.9f, 0, 1.0f, 0.0f, 7);
  penalised.repetition_penalty = 1.3f;
  penalised.frequency_penalty = 0.1f;
  const std::vector<ChiSquareCase> cases = {
      {"temperature 1", make(1.0f, 0, 1.0f, 0.0f, 1), {}},
      {"top_k 5, temperature 1.7", make(1.7f, 5, 1.0f, 0.0f, 3), {}},
      {"top_k 8, top_p 0.9, min_p 0.05, temperature 0.8", make(0.8f, 8, 0.9f, 0.05f, 6), {}},
      {"greedy", make(0.0f, 0, 1.0f, 0.0f, 6), {}},
      {"penalties", penalised, {0, 0, 3, 7, 11}},
  };
  const std::vector<float> logits = sample_logits();
  for (const ChiSquareCase& c : cases) {
    const std::vector<double> expected = filtered_distribution(logits, c.params, c.history);
    Sampler sampler(c.params);
    std::vector<float> penalised_logits = logits;
    std::vector<float> probs(logits.size(), -1.0f);
    sampler.distribution(penalised_logits, c.history, probs);
    for (size_t j = 0; j < logits.size(); ++j) {
      EXPECT_NEAR(probs[j], expected[j], 1e-6) << c.name << ", token " << j;
      EXPECT_EQ(probs[j] == 0.0f, expected[j] == 0.0) << c.name << ", token " << j;
    }
    // It penalised the logits in place, as sample() does, and drew nothing.
    std::vector<float> reference = logits;
    apply_penalties(reference, c.history, c.params);
    EXPECT_EQ(penalised_logits, reference) << c.name;
    Sampler fresh(c.params);
    EXPECT_EQ(sampler.uniform(), fresh.uniform()) << c.name;
  }
}

TEST(Sampler, LargeVocabularyTopPMatchesTheFilteredOne) {
  // Thousands of candidates: the sampler widens its partially sorted prefix several times.
  struct Case {
    float stddev;
    SamplingParams params;
  };
  const std::vector<Case> cases = {
      {1.0f, make(1.0f, 0, 0.9f, 0.0f, 11)},
      {2.0f, make(0.7f, 0, 0.8f, 0.0f, 12)},
      {2.0f, make(1.2f, 500, 0.95f, 0.01f, 13)},
  };
  for (const Case& c : cases) {
    const std::vector<float> logits = random_logits(1000, c.stddev, 99);
    const std::vector<double> expected = filtered_distribution(logits, c.params);
    const auto support =
        std::count_if(expected.begin(), expected.end(), [](double p) { return p > 0; });
    EXPECT_GT(support, 64);   // more than the first prefix the sampler sorts
    EXPECT_LT(support, 1000);  // and something was filtered
    const std::vector<int> counts = histogram(logits, c.params, {}, 20000);
    EXPECT_GT(chi_square_p(counts, expected, 20), 1e-3) << "stddev " << c.stddev;
  }
}

// Probabilities 0.4, 0.3, 0.15, 0.1, 0.05 as logits.
std::vector<float> five_logits() {
  std::vector<float> logits;
  for (double p : {0.4, 0.3, 0.15, 0.1, 0.05}) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

void expect_distribution(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "token " << i;
}

TEST(Sampler, FilteredDistributionFollowsTheDocumentedChain) {
  const std::vector<float> logits = five_logits();
  // top-p keeps the shortest prefix reaching the mass: 0.4 + 0.3 >= 0.65.
  expect_distribution(filtered_distribution(logits, make(1.0f, 0, 0.65f, 0.0f, 0)),
                      {4 / 7.0, 3 / 7.0, 0, 0, 0});
  // Temperature applies after top-p: p ∝ sqrt(0.4), sqrt(0.3).
  const double a = std::sqrt(0.4), b = std::sqrt(0.3);
  expect_distribution(filtered_distribution(logits, make(2.0f, 0, 0.65f, 0.0f, 0)),
                      {a / (a + b), b / (a + b), 0, 0, 0});
  // min-p 0.3 keeps probabilities >= 0.12.
  expect_distribution(filtered_distribution(logits, make(1.0f, 0, 1.0f, 0.3f, 0)),
                      {0.4 / 0.85, 0.3 / 0.85, 0.15 / 0.85, 0, 0});
  // top-p renormalises over what top-k kept: 0.4 / 0.85 + 0.3 / 0.85 = 0.82 >= 0.8, so two
  // tokens (over the full distribution it would have kept three).
  expect_distribution(filtered_distribution(logits, make(1.0f, 3, 0.8f, 0.0f, 0)),
                      {4 / 7.0, 3 / 7.0, 0, 0, 0});
  // min-p judges the temperature-1 probabilities, before temperature flattens them.
  const double x = std::cbrt(0.4), y = std::cbrt(0.3), z = std::cbrt(0.15);
  expect_distribution(filtered_distribution(logits, make(3.0f, 0, 1.0f, 0.3f, 0)),
                      {x / (x + y + z), y / (x + y + z), z / (x + y + z), 0, 0});
  // Greedy.
  expect_distribution(filtered_distribution(logits, make(0.0f, 0, 1.0f, 0.0f, 0)),
                      {1, 0, 0, 0, 0});
}

TEST(Sampler, GreedyPicksTheArgmaxAndTheLowestIdOnTies) {
  std::vector<float> tied = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(Sampler(make(0.0f, 0, 1.0f, 0.0f, 1)).sample(tied, {}), 1);
  for (uint32_t seed = 0; seed < 50; ++seed) {
    std::vector<float> logits = random_logits(1000, 2.0f, seed);
    const auto expected = std::max_element(logits.begin(), logits.end()) - logits.begin();
    // Negative temperature is greedy too, and the seed does not matter.
    Sampler sampler(make(seed % 2 ? 0.0f : -1.0f, 40, 0.9f, 0.0f, seed));
    EXPECT_EQ(sampler.sample(logits, {}), expected);
  }
}

TEST(Sampler, GreedyJudgesPenalisedLogits) {
  SamplingParams p = make(0.0f, 0, 1.0f, 0.0f, 0);
  p.repetition_penalty = 1.5f;
  std::vector<float> logits = {2.0f, 1.9f};
  EXPECT_EQ(Sampler(p).sample(logits, std::vector<int32_t>{0}), 1);  // 2 / 1.5 < 1.9
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  const std::vector<float> logits = random_logits(50, 1.0f, 3);
  auto run = [&](uint64_t seed) {
    Sampler sampler(make(1.0f, 0, 0.95f, 0.0f, seed));
    std::vector<int32_t> tokens;
    std::vector<float> work;
    for (int i = 0; i < 1000; ++i) {
      work = logits;
      tokens.push_back(sampler.sample(work, tokens));
    }
    return tokens;
  };
  const std::vector<int32_t> a = run(7), b = run(7), c = run(8);
  EXPECT_EQ(a, b);
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i] != c[i];
  EXPECT_GT(differ, 500);
}

TEST(Sampler, RandomStreamIsTheDocumentedXoshiro) {
  // xoshiro256** seeded by splitmix64(42), values computed independently in Python:
  // a change here changes every seeded output on every platform.
  Sampler sampler(make(1.0f, 0, 1.0f, 0.0f, 42));
  const double expected[] = {755370490430936.0, 3413550631330343.0, 6125286505004179.0,
                             8328893607999084.0};
  for (double e : expected) EXPECT_EQ(sampler.uniform() * 0x1.0p53, e);
}

TEST(Sampler, FilteredTokensAreNeverDrawnEvenOnTies) {
  // Equal logits: top-k and top-p keep the lowest ids.
  const std::vector<float> flat(6, 1.0f);
  std::vector<int> counts = histogram(flat, make(1.0f, 2, 1.0f, 0.0f, 5), {}, 20000);
  EXPECT_EQ(counts[0] + counts[1], 20000);
  EXPECT_NEAR(counts[0], 10000, 400);
  counts = histogram(flat, make(1.0f, 0, 0.5f, 0.0f, 6), {}, 20000);  // 3 of 6 reach 0.5
  EXPECT_EQ(counts[0] + counts[1] + counts[2], 20000);
  EXPECT_GT(counts[2], 6000);
  // min-p 0.5 over probabilities 0.4 .. 0.05 keeps only 0.4 and 0.3 (>= 0.2).
  counts = histogram(five_logits(), make(2.5f, 0, 1.0f, 0.5f, 7), {}, 20000);
  EXPECT_EQ(counts[0] + counts[1], 20000);
}

TEST(Sampler, PenaltiesChangeLogitsAsDefined) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  const std::vector<float> original = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f};
  const std::vector<int32_t> history = {0, 1, 0, 3};
  auto penalised = [&](int repeat_last_n) {
    p.repeat_last_n = repeat_last_n;
    std::vector<float> logits = original;
    apply_penalties(logits, history, p);
    return logits;
  };
  // Token 0 (twice): 2 / 2 - (2 * 0.25 + 0.5) = 0. Token 1: -2 * 2 - 0.75. Token 3:
  // 0.5 / 2 - 0.75. Tokens 2 and 4 were not seen.
  EXPECT_EQ(penalised(64), (std::vector<float>{0.0f, -4.75f, 1.0f, -0.5f, 3.0f}));
  EXPECT_EQ(penalised(-1), (std::vector<float>{0.0f, -4.75f, 1.0f, -0.5f, 3.0f}));
  // Only the last two tokens (0 once, 3 once) count.
  EXPECT_EQ(penalised(2), (std::vector<float>{0.25f, -2.0f, 1.0f, -0.5f, 3.0f}));
  EXPECT_EQ(penalised(0), original);

  // The sampler penalises in place exactly so, and its reused counters start clean.
  p.repeat_last_n = 64;
  Sampler sampler(p);
  std::vector<float> logits = original;
  sampler.sample(logits, history);
  EXPECT_EQ(logits, penalised(64));
  logits = original;
  sampler.sample(logits, std::vector<int32_t>{4});
  EXPECT_EQ(logits, (std::vector<float>{2.0f, -2.0f, 1.0f, 0.5f, 3.0f / 2 - 0.75f}));

  // A history token outside the vocabulary is an error that leaves the logits alone.
  logits = original;
  EXPECT_THROW(apply_penalties(logits, std::vector<int32_t>{1, 5}, p), Error);
  EXPECT_EQ(logits, original);
}

TEST(Sampler, LogprobsAreOfThePenalisedDistributionBeforeFiltering) {
  SamplingParams p = make(0.5f, 2, 1.0f, 0.0f, 3);
  p.n_logprobs = 3;
  p.repetition_penalty = 2.0f;
  const std::vector<float> original = {1.0f, 3.0f, 2.5f, 2.5f, -1.0f, 0.0f};
  const std::vector<int32_t> history = {1};  // token 1: 3 / 2 = 1.5
  std::vector<float> penalised = original;
  apply_penalties(penalised, history, p);
  double z = 0.0;
  for (float l : penalised) z += std::exp(double(l));
  auto logprob = [&](int t) { return std::log(std::exp(double(penalised[size_t(t)])) / z); };

  Sampler sampler(p);
  for (int i = 0; i < 20; ++i) {
    std::vector<float> logits = original;
    const int32_t token = sampler.sample(logits, history);
    EXPECT_TRUE(token == 2 || token == 3);  // top-k 2 of the penalised logits
    EXPECT_NEAR(sampler.chosen_logprob(), logprob(token), 1e-5);
    const std::span<const TokenLogprob> top = sampler.top_logprobs();
    ASSERT_EQ(top.size(), 3u);
    // 2.5 (ids 2 and 3, tie to the lower id first), then 1.5 (id 1).
    EXPECT_EQ(top[0].token, 2);
    EXPECT_EQ(top[1].token, 3);
    EXPECT_EQ(top[2].token, 1);
    for (const TokenLogprob& t : top) EXPECT_NEAR(t.logprob, logprob(t.token), 1e-5);
  }
  // logprobs alone: the chosen token's, no alternatives.
  p.n_logprobs = 0;
  p.logprobs = true;
  Sampler plain(p);
  std::vector<float> logits = original;
  const int32_t token = plain.sample(logits, history);
  EXPECT_NEAR(plain.chosen_logprob(), logprob(token), 1e-5);
  EXPECT_TRUE(plain.top_logprobs().empty());
}

TEST(Sampler, BadParametersNameTheField) {
  auto error_of = [](SamplingParams p) -> std::string {
    try {
      Sampler s(p);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  SamplingParams p;
  p.top_p = 1.5f;
  EXPECT_NE(error_of(p).find("top_p"), std::string::npos);
  p = {};
  p.min_p = -0.1f;
  EXPECT_NE(error_of(p).find("min_p"), std::string::npos);
  p = {};
  p.top_k = -1;
  EXPECT_NE(error_of(p).find("top_k"), std::string::npos);
  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_NE(error_of(p).find("repetition_penalty"), std::string::npos);
  p = {};
  p.repeat_last_n = -2;
  EXPECT_NE(error_of(p).find("repeat_last_n"), std::string::npos);
  p = {};
  p.n_logprobs = -1;
  EXPECT_NE(error_of(p).find("n_logprobs"), std::string::npos);
  p = {};
  p.temperature = std::nanf("");
  EXPECT_NE(error_of(p).find("temperature"), std::string::npos);
  std::vector<float> empty;
  EXPECT_THROW(Sampler(SamplingParams{}).sample(empty, {}), Error);
}

TEST(Sampler, SampleDoesNotAllocateAfterTheFirstCall) {
  SamplingParams p = make(0.9f, 100, 0.9f, 0.02f, 1);
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = 0.1f;
  p.n_logprobs = 5;
  const std::vector<float> logits = random_logits(5000, 2.0f, 4);
  std::vector<int32_t> history(200);
  for (size_t i = 0; i < history.size(); ++i) history[i] = static_cast<int32_t>(i * 7 % 5000);
  std::vector<float> work = logits;
  for (const SamplingParams& params :
       {p, make(1.0f, 0, 0.5f, 0.0f, 2), make(0.0f, 0, 1.0f, 0.0f, 3)}) {
    Sampler sampler(params);
    sampler.sample(work, history);
    const long before = test::allocations();
    for (int i = 0; i < 50; ++i) {
      std::copy(logits.begin(), logits.end(), work.begin());
      sampler.sample(work, history);
    }
    EXPECT_EQ(test::allocations(), before) << "top_p " << params.top_p;
  }
}

}  // namespace
}  // namespace ridge
