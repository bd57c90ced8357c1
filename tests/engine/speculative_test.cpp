#include "engine/speculative.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"

namespace ridge {
namespace {

using Dist = std::vector<double>;

// Chi-square statistic of counts against probabilities (bins with p = 0 must be empty).
double chi_square(const std::vector<long>& counts, const Dist& p, long n) {
  double stat = 0.0;
  for (size_t j = 0; j < p.size(); ++j) {
    if (p[j] == 0.0) {
      EXPECT_EQ(counts[j], 0) << "token " << j << " has target probability 0 but was emitted";
      continue;
    }
    const double expected = p[j] * static_cast<double>(n);
    stat += (counts[j] - expected) * (counts[j] - expected) / expected;
  }
  return stat;
}

// Upper 0.1% points of the chi-square distribution (tables), by degrees of freedom.
constexpr double kChiSquare999[] = {0, 10.828, 13.816, 16.266, 18.467, 20.515};

Dist row(std::initializer_list<double> v) { return Dist(v); }

Dist concat(const std::vector<Dist>& rows) {
  Dist out;
  for (const Dist& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

// A whole generation of kLength tokens where the target at absolute position k is p[k]
// and the draft is q[k] (both independent of earlier tokens), stitched from speculative
// steps of up to gamma drafted tokens. Speculative decoding is exact iff every position's
// emitted token is distributed as p[k], whatever the draft.
TEST(Speculative, EmittedTokensFollowTheTargetAtEveryPosition) {
  const std::vector<Dist> p = {row({0.5, 0.2, 0.2, 0.1, 0.0}), row({0.1, 0.1, 0.1, 0.1, 0.6}),
                               row({0.3, 0.3, 0.2, 0.1, 0.1}), row({0.0, 0.25, 0.25, 0.25, 0.25}),
                               row({0.9, 0.025, 0.025, 0.025, 0.025}), row({0.2, 0.2, 0.2, 0.2, 0.2})};
  // Drafts that disagree with the target in different ways, including putting mass where
  // the target has none (token 4 at position 0, token 0 at position 3).
  const std::vector<Dist> q = {row({0.1, 0.1, 0.1, 0.1, 0.6}), row({0.5, 0.2, 0.2, 0.1, 0.0}),
                               row({0.3, 0.3, 0.2, 0.1, 0.1}), row({0.6, 0.1, 0.1, 0.1, 0.1}),
                               row({0.2, 0.2, 0.2, 0.2, 0.2}), row({0.0, 0.0, 0.0, 0.5, 0.5})};
  const size_t kLength = p.size(), kVocab = 5;
  const int kGamma = 3;
  const long kSequences = 40000;

  Sampler rng(SamplingParams{.seed = 1234});
  std::vector<std::vector<long>> counts(kLength, std::vector<long>(kVocab, 0));
  for (long s = 0; s < kSequences; ++s) {
    size_t length = 0;
    while (length < kLength) {
      const size_t gamma = std::min<size_t>(kGamma, kLength - 1 - length);  // room for next_token
      std::vector<Dist> target_rows, draft_rows;
      std::vector<int32_t> drafted;
      for (size_t i = 0; i < gamma; ++i) {
        draft_rows.push_back(q[length + i]);
        target_rows.push_back(p[length + i]);
        drafted.push_back(sample_categorical<double>(q[length + i], rng.uniform()));
      }
      target_rows.push_back(p[length + gamma]);
      const Dist target = concat(target_rows), draft = concat(draft_rows);
      SpeculativeStep step = verify_draft<double>(target, draft, drafted, rng);
      ASSERT_GE(step.n_accepted, 0);
      ASSERT_LE(step.n_accepted, static_cast<int>(gamma));
      for (int i = 0; i < step.n_accepted; ++i) ++counts[length++][drafted[i]];
      ++counts[length++][step.next_token];
    }
  }
  for (size_t k = 0; k < kLength; ++k) {
    const int dof = static_cast<int>(std::count_if(p[k].begin(), p[k].end(), [](double x) { return x > 0; })) - 1;
    EXPECT_LT(chi_square(counts[k], p[k], kSequences), kChiSquare999[dof]) << "position " << k;
  }
}

TEST(Speculative, AcceptanceRateIsTheOverlapOfTargetAndDraft) {
  const Dist p = {0.6, 0.3, 0.1, 0.0}, q = {0.2, 0.2, 0.3, 0.3};
  double alpha = 0.0;  // sum of min(p, q) = 0.2 + 0.2 + 0.1 + 0 = 0.5
  for (size_t j = 0; j < p.size(); ++j) alpha += std::min(p[j], q[j]);
  Sampler rng(SamplingParams{.seed = 7});
  const long kSteps = 50000;
  long accepted = 0;
  const Dist target = concat({p, p});
  for (long s = 0; s < kSteps; ++s) {
    const int32_t x = sample_categorical<double>(q, rng.uniform());
    accepted += verify_draft<double>(target, q, std::vector<int32_t>{x}, rng).n_accepted;
  }
  const double rate = static_cast<double>(accepted) / kSteps;
  EXPECT_NEAR(rate, alpha, 4 * std::sqrt(alpha * (1 - alpha) / kSteps));
}

// Greedy verification: one-hot p and q. Every drafted token is kept iff it is the
// target's argmax, and the first mismatch is replaced by the target's argmax.
TEST(Speculative, GreedyAcceptsExactlyWhenTokensMatch) {
  const size_t kVocab = 4;
  auto one_hot = [&](int t) { Dist d(kVocab, 0.0); d[t] = 1.0; return d; };
  auto any_u = [] { return 0.999999; };  // with one-hot rows every u in [0, 1) decides alike
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      // Target argmax 2 then 1 then bonus 3; draft proposes a then b.
      const Dist target = concat({one_hot(2), one_hot(1), one_hot(3)});
      const Dist draft = concat({one_hot(a), one_hot(b)});
      SpeculativeStep step = verify_draft<double>(target, draft, std::vector<int32_t>{a, b}, any_u);
      if (a != 2) {
        EXPECT_EQ(step.n_accepted, 0);
        EXPECT_EQ(step.next_token, 2);
      } else if (b != 1) {
        EXPECT_EQ(step.n_accepted, 1);
        EXPECT_EQ(step.next_token, 1);
      } else {
        EXPECT_EQ(step.n_accepted, 2);
        EXPECT_EQ(step.next_token, 3);  // the bonus token
      }
    }
}

TEST(Speculative, IdenticalDraftIsAlwaysAccepted) {
  const Dist p = {0.25, 0.25, 0.5};
  const Dist target = concat({p, p, p, {0.0, 1.0, 0.0}}), draft = concat({p, p, p});
  Sampler rng(SamplingParams{.seed = 99});
  for (int s = 0; s < 2000; ++s) {
    std::vector<int32_t> drafted;
    for (int i = 0; i < 3; ++i) drafted.push_back(sample_categorical<double>(p, rng.uniform()));
    SpeculativeStep step = verify_draft<double>(target, draft, drafted, rng);
    ASSERT_EQ(step.n_accepted, 3);
    ASSERT_EQ(step.next_token, 1);  // bonus from p_{gamma+1}
  }
}

TEST(Speculative, FloatRowsGiveTheSameDecisionsAsDouble) {
  const std::vector<float> pf = {0.6f, 0.4f, 0.3f, 0.7f}, qf = {0.5f, 0.5f};
  const Dist pd = {0.6, 0.4, 0.3, 0.7}, qd = {0.5, 0.5};
  for (double u : {0.0, 0.5, 0.79, 0.81, 0.999}) {
    auto source = [u] { return u; };
    SpeculativeStep sf = verify_draft<float>(pf, qf, std::vector<int32_t>{1}, source);
    SpeculativeStep sd = verify_draft<double>(pd, qd, std::vector<int32_t>{1}, source);
    EXPECT_EQ(sf.n_accepted, sd.n_accepted) << u;
    EXPECT_EQ(sf.next_token, sd.next_token) << u;
    // Token 1: p/q = 0.4/0.5 = 0.8, so u < 0.8 accepts; rejection leaves residual {0.1, 0}.
    EXPECT_EQ(sd.n_accepted, u < 0.8 ? 1 : 0) << u;
    if (u >= 0.8) {
      EXPECT_EQ(sd.next_token, 0);
    }
  }
}

TEST(Speculative, ConsumesOneDrawPerTestPlusOne) {
  const Dist p = {0.5, 0.5}, q = {0.9, 0.1};
  const Dist target = concat({p, p, p}), draft = concat({q, q});
  int calls = 0;
  // Accept (u = 0) then reject (u = 0.99 >= 0.5/0.9): 2 tests + 1 residual draw.
  const double draws[] = {0.0, 0.99, 0.3};
  auto source = [&] { return draws[calls++]; };
  SpeculativeStep step = verify_draft<double>(target, draft, std::vector<int32_t>{0, 0}, source);
  EXPECT_EQ(step.n_accepted, 1);
  EXPECT_EQ(step.next_token, 1);  // residual max(0, p - q) = {0, 0.4}
  EXPECT_EQ(calls, 3);
}

TEST(Speculative, SeededSamplerReproducesTheSameSteps) {
  const Dist p = {0.1, 0.2, 0.3, 0.4}, q = {0.4, 0.3, 0.2, 0.1};
  const Dist target = concat({p, p}), draft = q;
  auto run = [&](uint64_t seed) {
    Sampler rng(SamplingParams{.seed = seed});
    std::vector<int> out;
    for (int s = 0; s < 200; ++s) {
      const int32_t x = sample_categorical<double>(q, rng.uniform());
      SpeculativeStep step = verify_draft<double>(target, draft, std::vector<int32_t>{x}, rng);
      out.push_back(step.n_accepted * 100 + step.next_token);
    }
    return out;
  };
  EXPECT_EQ(run(5), run(5));
  EXPECT_NE(run(5), run(6));
}

TEST(Speculative, RejectsDraftsTheDraftCouldNotHaveProduced) {
  const Dist p = {0.5, 0.5}, q = {1.0, 0.0};
  const Dist target = concat({p, p});
  auto u = [] { return 0.5; };
  // q(x) = 0: the ratio p/q is undefined and the draft cannot have proposed x.
  EXPECT_THROW(verify_draft<double>(target, q, std::vector<int32_t>{1}, u), Error);
  EXPECT_THROW(verify_draft<double>(target, q, std::vector<int32_t>{2}, u), Error);   // out of range
  EXPECT_THROW(verify_draft<double>(target, q, std::vector<int32_t>{-1}, u), Error);
  EXPECT_THROW(verify_draft<double>(p, q, std::vector<int32_t>{0}, u), Error);        // no bonus row
  EXPECT_THROW(verify_draft<double>(target, Dist{1.0}, std::vector<int32_t>{0}, u), Error);
  try {
    verify_draft<double>(target, q, std::vector<int32_t>{1}, u);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("draft probability"), std::string::npos) << e.what();
  }
}

TEST(Speculative, NoDraftMeansOnePlainSampleFromTheTarget) {
  const Dist p = {0.0, 0.0, 1.0};
  SpeculativeStep step = verify_draft<double>(p, Dist{}, std::vector<int32_t>{}, [] { return 0.7; });
  EXPECT_EQ(step.n_accepted, 0);
  EXPECT_EQ(step.next_token, 2);
}

TEST(Speculative, CertainDraftIsVerifyDraftWithOneHotRows) {
  // n-gram drafts come with no distribution: q is one-hot at each drafted token. The
  // shortcut must make the same decisions from the same draws as the general rule.
  const Dist p = concat({row({0.5, 0.2, 0.2, 0.1, 0.0}), row({0.1, 0.1, 0.1, 0.1, 0.6}),
                         row({0.0, 0.0, 1.0, 0.0, 0.0}), row({0.2, 0.2, 0.2, 0.2, 0.2})});
  const std::vector<std::vector<int32_t>> drafts = {{0, 4, 2}, {1, 4, 2}, {0, 0, 2}, {4, 1, 3}, {0, 4, 1}};
  for (const std::vector<int32_t>& drafted : drafts) {
    Dist q;
    for (int32_t x : drafted) {
      Dist one_hot(5, 0.0);
      one_hot[static_cast<size_t>(x)] = 1.0;
      q.insert(q.end(), one_hot.begin(), one_hot.end());
    }
    for (uint64_t seed = 0; seed < 300; ++seed) {
      Sampler a(SamplingParams{.seed = seed});
      Sampler b(SamplingParams{.seed = seed});
      const SpeculativeStep want = verify_draft<double>(p, q, drafted, a);
      const SpeculativeStep got = verify_certain_draft<double>(p, drafted, b);
      ASSERT_EQ(got.n_accepted, want.n_accepted) << "seed " << seed;
      ASSERT_EQ(got.next_token, want.next_token) << "seed " << seed;
      ASSERT_EQ(a.uniform(), b.uniform()) << "the same number of draws, seed " << seed;
    }
  }
  EXPECT_THROW(verify_certain_draft<double>(p, std::vector<int32_t>{0, 9, 1}, [] { return 0.1; }), Error);
  EXPECT_THROW(verify_certain_draft<double>(p, std::vector<int32_t>{0, 1}, [] { return 0.1; }), Error);
}

TEST(SampleCategorical, InverseCdfSkipsZeroWeights) {
  const Dist w = {0.0, 2.0, 0.0, 1.0, 1.0, 0.0};  // unnormalized; total 4
  EXPECT_EQ(sample_categorical<double>(w, 0.0), 1);
  EXPECT_EQ(sample_categorical<double>(w, 0.49), 1);
  EXPECT_EQ(sample_categorical<double>(w, 0.5), 3);
  EXPECT_EQ(sample_categorical<double>(w, 0.76), 4);
  EXPECT_EQ(sample_categorical<double>(w, 0.9999999999999999), 4);  // never the trailing zero
  EXPECT_THROW(sample_categorical<double>(Dist{0.0, 0.0}, 0.5), Error);
  EXPECT_THROW(sample_categorical<double>(Dist{}, 0.5), Error);
}

}  // namespace
}  // namespace ridge
