// How many tokens to draft: the length that maximises expected tokens per unit of time,
// from the measured acceptance and the measured cost of what drafting adds to a step.
//
//   DraftCosts costs{.draft_token = 0.35, .verify_token = 0.04};   // relative to one step
//   int32_t gamma = best_draft_length(0.8, costs, 8);              // 0: do not speculate
//
// With per-token acceptance probability alpha (drafted tokens accepted independently,
// until the first rejection), a step that verifies gamma drafts emits
//   E(gamma) = (1 - alpha^(gamma + 1)) / (1 - alpha)
// tokens (Leviathan et al. 2023) and costs 1 + gamma * (draft_token + verify_token) of a
// plain step. The best gamma maximises E(gamma) / cost(gamma); gamma = 0 (one token, cost 1)
// wins when no length beats it by more than `margin`.
#pragma once

#include <cstdint>

namespace ridge {

struct DraftCosts {
  double draft_token = 0.0;   // one drafted token, as a fraction of a plain target step:
                              // the draft model's bytes read per token over the target's
                              // (the roofline: both are memory-bound); 0 for n-gram lookup
  double verify_token = 0.0;  // one more token in the target's step, as a fraction of the
                              // step (measured: step time grows with its tokens)
};

// Expected tokens one verification emits, E(gamma) above (gamma + 1 when alpha >= 1).
double expected_tokens_per_step(double alpha, int32_t gamma);

// The gamma in 0..max_draft maximising E(gamma) / (1 + gamma * (draft + verify)); 0 unless
// that beats 1 by the factor 1 + margin.
int32_t best_draft_length(double alpha, const DraftCosts& costs, int32_t max_draft, double margin = 0.02);

// One request's acceptance estimate. Each verified draft is a run of Bernoulli trials up
// to the first rejection: accepted tokens are successes, a rejection one failure (tokens
// after it were never tested). Older evidence decays so the estimate follows the text
// (a code block copied from the prompt, then new prose).
class AcceptanceEstimate {
 public:
  explicit AcceptanceEstimate(double prior = 0.5, double prior_weight = 2.0, double decay = 0.9)
      : prior_(prior), prior_weight_(prior_weight), decay_(decay) {}
  void observe(int32_t n_drafted, int32_t n_accepted);
  double alpha() const;

 private:
  double prior_, prior_weight_, decay_;
  double successes_ = 0.0, trials_ = 0.0;
};

// The linear cost of a target step, seconds ~= fixed + per_token * n_tokens, fitted by
// exponentially weighted least squares over the engine's measured steps. verify_token()
// is per_token / (fixed + per_token * n): what one more token adds to a step of n tokens.
class StepCostModel {
 public:
  explicit StepCostModel(double decay = 0.98) : decay_(decay) {}
  void observe(int32_t n_tokens, double seconds);
  // Until steps of different sizes were seen, the prior: 1/20 of a one-token step.
  double verify_token(int32_t n_tokens) const;
  double step_seconds(int32_t n_tokens) const;  // 0 before any observation

 private:
  double decay_;
  double w_ = 0, wx_ = 0, wxx_ = 0, wy_ = 0, wxy_ = 0;
};

}  // namespace ridge
