// The draft-length policy: the expected-tokens formula, the best length for given costs,
// and the two estimators that feed it.
#include "engine/draft_length.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ridge {
namespace {

TEST(DraftLength, ExpectedTokensIsTheGeometricSum) {
  EXPECT_DOUBLE_EQ(expected_tokens_per_step(0.0, 5), 1.0);
  EXPECT_DOUBLE_EQ(expected_tokens_per_step(1.0, 5), 6.0);
  EXPECT_NEAR(expected_tokens_per_step(0.8, 4), 1 + 0.8 + 0.64 + 0.512 + 0.4096, 1e-12);
  EXPECT_NEAR(expected_tokens_per_step(0.5, 0), 1.0, 1e-12);
}

TEST(DraftLength, BestLengthMaximisesTokensPerCost) {
  // Free drafts and verification: always the cap.
  EXPECT_EQ(best_draft_length(0.5, {0.0, 0.0}, 8), 8);
  // Brute force over gamma for a few settings.
  for (double alpha : {0.3, 0.6, 0.8, 0.95}) {
    for (DraftCosts c : {DraftCosts{0.4, 0.05}, DraftCosts{0.1, 0.02}, DraftCosts{0.0, 0.1}}) {
      int32_t best = 0;
      double best_rate = 1.02;
      for (int32_t g = 1; g <= 8; ++g) {
        const double rate = expected_tokens_per_step(alpha, g) / (1 + g * (c.draft_token + c.verify_token));
        if (rate > best_rate) best_rate = rate, best = g;
      }
      EXPECT_EQ(best_draft_length(alpha, c, 8), best) << alpha << " " << c.draft_token << " " << c.verify_token;
    }
  }
  // A costly draft with mediocre acceptance never pays: alpha 0.4 at cost 0.45 per token
  // gives at most 1.4 / 1.45 < 1.
  EXPECT_EQ(best_draft_length(0.4, {0.4, 0.05}, 8), 0);
  EXPECT_EQ(best_draft_length(0.99, {0.0, 0.01}, 3), 3);  // the cap
}

TEST(DraftLength, AcceptanceCountsTrialsUpToTheFirstRejection) {
  AcceptanceEstimate a(/*prior=*/0.5, /*prior_weight=*/2.0, /*decay=*/1.0);
  EXPECT_DOUBLE_EQ(a.alpha(), 0.5);
  a.observe(4, 4);  // 4 successes, no failure
  a.observe(4, 1);  // 1 success, 1 failure (the 2 after it were never tested)
  EXPECT_DOUBLE_EQ(a.alpha(), (5 + 1.0) / (6 + 2.0));
  a.observe(0, 0);  // nothing drafted: no evidence
  EXPECT_DOUBLE_EQ(a.alpha(), 6.0 / 8.0);
  // With decay, recent evidence dominates: a long accepting run then rejections.
  AcceptanceEstimate b(0.5, 2.0, 0.8);
  for (int i = 0; i < 40; ++i) b.observe(4, 4);
  EXPECT_GT(b.alpha(), 0.95);
  for (int i = 0; i < 15; ++i) b.observe(4, 0);
  EXPECT_LT(b.alpha(), 0.3);
}

TEST(DraftLength, StepCostModelFitsFixedAndPerTokenCost) {
  StepCostModel m(1.0);
  EXPECT_DOUBLE_EQ(m.verify_token(1), 0.05);  // the prior until there is a slope
  for (int i = 0; i < 5; ++i) m.observe(1, 0.010);
  EXPECT_DOUBLE_EQ(m.verify_token(1), 0.05);  // one size only
  EXPECT_DOUBLE_EQ(m.step_seconds(1), 0.010);
  // 10 ms fixed + 1 ms per token.
  m = StepCostModel(1.0);
  for (int n : {1, 1, 4, 9, 1, 16, 2}) m.observe(n, 0.010 + 0.001 * n);
  EXPECT_NEAR(m.step_seconds(5), 0.015, 1e-12);
  EXPECT_NEAR(m.verify_token(1), 0.001 / 0.011, 1e-9);
  EXPECT_NEAR(m.verify_token(8), 0.001 / 0.018, 1e-9);
}

}  // namespace
}  // namespace ridge
