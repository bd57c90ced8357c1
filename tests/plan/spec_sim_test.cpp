#include "plan/spec_sim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "plan/stats.h"

namespace ridge::plan {
namespace {

TEST(Stats, ChiSquarePValuesMatchTables) {
  // Upper 5% and 0.1% points of chi-square tables.
  EXPECT_NEAR(chi_square_p_value(3.841, 1), 0.05, 1e-4);
  EXPECT_NEAR(chi_square_p_value(7.815, 3), 0.05, 1e-4);
  EXPECT_NEAR(chi_square_p_value(18.307, 10), 0.05, 1e-4);
  EXPECT_NEAR(chi_square_p_value(18.467, 4), 0.001, 1e-5);
  EXPECT_NEAR(chi_square_p_value(2.0, 2), std::exp(-1.0), 1e-12);  // dof 2: p = exp(-x/2)
  EXPECT_EQ(chi_square_p_value(0.0, 5), 1.0);
  EXPECT_LT(chi_square_p_value(500.0, 5), 1e-100);
  EXPECT_THROW(chi_square_p_value(1.0, 0), Error);
}

TEST(Stats, ChiSquareTestPoolsRareBinsAndCatchesImpossibleTokens) {
  const std::vector<double> p = {0.5, 0.3, 0.19, 0.01};
  ChiSquare c = chi_square_test(std::vector<int64_t>{50, 30, 19, 1}, p);  // token 3 expects 1
  EXPECT_EQ(c.pooled_bins, 1);
  EXPECT_EQ(c.dof, 2);  // pooled into the smallest bin
  EXPECT_NEAR(c.statistic, 0.0, 1e-12);
  EXPECT_NEAR(c.p_value, 1.0, 1e-12);
  c = chi_square_test(std::vector<int64_t>{60, 30, 10, 0}, std::vector<double>{0.5, 0.3, 0.2, 0.0});
  EXPECT_EQ(c.dof, 2);
  EXPECT_NEAR(c.statistic, 100.0 / 50 + 0 + 100.0 / 20, 1e-12);
  c = chi_square_test(std::vector<int64_t>{50, 30, 19, 1}, std::vector<double>{0.5, 0.3, 0.2, 0.0});
  EXPECT_TRUE(std::isinf(c.statistic));
  EXPECT_EQ(c.p_value, 0.0);
  EXPECT_NEAR(total_variation(std::vector<double>{0.5, 0.5}, std::vector<double>{0.2, 0.8}), 0.3, 1e-15);
}

TEST(SpecSim, FormulaForTokensPerPass) {
  EXPECT_NEAR(expected_tokens_per_pass(0.8, 4), (1 - std::pow(0.8, 5)) / 0.2, 1e-12);  // 3.3616
  EXPECT_NEAR(expected_tokens_per_pass(0.8, 4), 3.3616, 1e-12);
  EXPECT_EQ(expected_tokens_per_pass(1.0, 4), 5.0);
  EXPECT_EQ(expected_tokens_per_pass(0.0, 4), 1.0);
  EXPECT_EQ(expected_tokens_per_pass(0.7, 0), 1.0);
}

TEST(SpecSim, RandomPairsHaveTheRequestedOverlap) {
  for (double alpha : {0.0, 0.3, 0.7, 0.95, 1.0}) {
    const DistributionPair pair = random_pair_with_overlap(17, alpha, 42);
    double sp = 0, sq = 0;
    for (size_t j = 0; j < pair.p.size(); ++j) {
      EXPECT_GE(pair.p[j], 0.0);
      EXPECT_GE(pair.q[j], 0.0);
      sp += pair.p[j];
      sq += pair.q[j];
    }
    EXPECT_NEAR(sp, 1.0, 1e-12);
    EXPECT_NEAR(sq, 1.0, 1e-12);
    EXPECT_NEAR(acceptance_rate(pair.p, pair.q), alpha, 1e-12) << alpha;
    EXPECT_NEAR(total_variation(pair.p, pair.q), 1.0 - alpha, 1e-12) << alpha;
  }
  EXPECT_THROW(random_pair_with_overlap(1, 0.5, 1), Error);
  EXPECT_THROW(random_pair_with_overlap(8, 1.5, 1), Error);
}

TEST(SpecSim, OutputFollowsTheTargetAndTheFormula) {
  const std::vector<double> p = {0.5, 0.3, 0.2}, q = {0.2, 0.3, 0.5};  // alpha = 0.7
  const SpecSimResult r = simulate_speculation(p, q, 4, 100000, 1);
  EXPECT_NEAR(r.alpha, 0.7, 1e-12);
  EXPECT_GT(r.check.p_value, 1e-3) << "chi-square " << r.check.statistic;
  EXPECT_LT(r.tv_to_target, 0.01);
  EXPECT_EQ(r.check.dof, 2);
  EXPECT_NEAR(r.tokens_per_pass, expected_tokens_per_pass(0.7, 4), 4 * r.tokens_per_pass_stderr);
  EXPECT_NEAR(r.measured_acceptance, 0.7, 0.01);
  EXPECT_LT(r.tokens_per_pass_stderr, 0.01);
  int64_t total = 0;
  for (int64_t c : r.counts) total += c;
  EXPECT_EQ(total, r.tokens);
}

// The simulation's check has power: if the draft's own tokens were emitted without the
// accept/reject rule, the output would follow q, and the chi-square test says so.
TEST(SpecSim, ChiSquareRejectsTheDraftDistribution) {
  const std::vector<double> p = {0.5, 0.3, 0.2}, q = {0.2, 0.3, 0.5};
  const SpecSimResult r = simulate_speculation(q, q, 4, 20000, 3);  // emits q-distributed tokens
  EXPECT_GT(chi_square_test(r.counts, p).statistic, 1000);
  EXPECT_LT(chi_square_test(r.counts, p).p_value, 1e-10);
}

TEST(SpecSim, SweepAgreesWithTheFormula) {
  const std::vector<double> alphas = {0.5, 0.8, 0.95};
  const std::vector<int> gammas = {1, 3, 6};
  const std::vector<SweepPoint> pts = sweep_acceptance(alphas, gammas, 40000, 16, 9);
  ASSERT_EQ(pts.size(), 9u);
  for (const SweepPoint& s : pts) {
    EXPECT_LT(std::fabs(s.z()), 4.5) << "alpha " << s.alpha << " gamma " << s.gamma << ": " << s.tokens_per_pass
                                      << " vs " << s.expected;
    EXPECT_NEAR(s.measured_alpha, s.alpha, 0.02);
  }
}

TEST(SpecSim, IdenticalDraftAcceptsEverything) {
  const std::vector<double> p = {0.25, 0.75};
  const SpecSimResult r = simulate_speculation(p, p, 5, 1000, 2);
  EXPECT_EQ(r.tokens, 6000);  // gamma + 1 per pass, always
  EXPECT_EQ(r.tokens_per_pass_stderr, 0.0);
  EXPECT_EQ(r.measured_acceptance, 1.0);
}

TEST(SpecSim, ChecksDistributions) {
  EXPECT_THROW(checked_distribution(std::vector<double>{0.5, 0.6}, "--p"), Error);
  EXPECT_THROW(checked_distribution(std::vector<double>{1.0}, "--p"), Error);
  EXPECT_THROW(checked_distribution(std::vector<double>{1.5, -0.5}, "--p"), Error);
  EXPECT_THROW(checked_distribution(std::vector<double>{NAN, 1.0}, "--p"), Error);
  const std::vector<double> d = checked_distribution(std::vector<double>{0.3333, 0.3333, 0.3334}, "--p");
  EXPECT_NEAR(d[0] + d[1] + d[2], 1.0, 1e-15);
  EXPECT_THROW(simulate_speculation(std::vector<double>{0.5, 0.5}, std::vector<double>{1.0, 0.0, 0.0}, 2, 10, 1), Error);
  EXPECT_THROW(simulate_speculation(std::vector<double>{0.5, 0.5}, std::vector<double>{0.5, 0.5}, -1, 10, 1), Error);
  EXPECT_THROW(simulate_speculation(std::vector<double>{0.5, 0.5}, std::vector<double>{0.5, 0.5}, 2, 0, 1), Error);
}

}  // namespace
}  // namespace ridge::plan
