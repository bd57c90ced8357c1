#include "engine/draft_length.h"

#include <algorithm>
#include <cmath>

namespace ridge {

double expected_tokens_per_step(double alpha, int32_t gamma) {
  if (alpha >= 1.0) return gamma + 1.0;
  alpha = std::max(alpha, 0.0);
  return (1.0 - std::pow(alpha, gamma + 1)) / (1.0 - alpha);
}

int32_t best_draft_length(double alpha, const DraftCosts& costs, int32_t max_draft, double margin) {
  const double per_draft = std::max(0.0, costs.draft_token) + std::max(0.0, costs.verify_token);
  int32_t best = 0;
  double best_rate = 1.0 + margin;  // gamma = 0: one token for one step, plus the margin
  for (int32_t gamma = 1; gamma <= max_draft; ++gamma) {
    const double rate = expected_tokens_per_step(alpha, gamma) / (1.0 + gamma * per_draft);
    if (rate > best_rate) {
      best_rate = rate;
      best = gamma;
    }
  }
  return best;
}

void AcceptanceEstimate::observe(int32_t n_drafted, int32_t n_accepted) {
  if (n_drafted <= 0) return;
  successes_ = successes_ * decay_ + n_accepted;
  trials_ = trials_ * decay_ + n_accepted + (n_accepted < n_drafted ? 1 : 0);
}

double AcceptanceEstimate::alpha() const {
  return (successes_ + prior_ * prior_weight_) / (trials_ + prior_weight_);
}

void StepCostModel::observe(int32_t n_tokens, double seconds) {
  if (n_tokens <= 0 || !(seconds > 0)) return;
  const double x = n_tokens;
  w_ = w_ * decay_ + 1;
  wx_ = wx_ * decay_ + x;
  wxx_ = wxx_ * decay_ + x * x;
  wy_ = wy_ * decay_ + seconds;
  wxy_ = wxy_ * decay_ + x * seconds;
}

double StepCostModel::step_seconds(int32_t n_tokens) const {
  if (w_ <= 0) return 0;
  const double mean_x = wx_ / w_, mean_y = wy_ / w_;
  const double var = wxx_ / w_ - mean_x * mean_x;
  if (var < 0.25) return mean_y;  // one size seen: no slope yet
  const double slope = std::max(0.0, (wxy_ / w_ - mean_x * mean_y) / var);
  return std::max(1e-9, mean_y + slope * (n_tokens - mean_x));
}

double StepCostModel::verify_token(int32_t n_tokens) const {
  constexpr double kPrior = 0.05;
  if (w_ <= 0) return kPrior;
  const double mean_x = wx_ / w_, mean_y = wy_ / w_;
  const double var = wxx_ / w_ - mean_x * mean_x;
  if (var < 0.25 || !(mean_y > 0)) return kPrior;
  const double slope = std::max(0.0, (wxy_ / w_ - mean_x * mean_y) / var);
  const double fixed = std::max(1e-9, mean_y - slope * mean_x);
  return slope / (fixed + slope * std::max(n_tokens, 1));
}

}  // namespace ridge
