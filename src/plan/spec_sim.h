// A simulation of speculative decoding on fixed categorical distributions, the engine of
// `ridge spec-sim`: the target p and draft q are the same at every position, the draft
// proposes gamma tokens from q, and the engine's own rule (engine/speculative.h) keeps or
// replaces them. It shows two facts: the output is distributed exactly as p, and a target
// pass yields (1 - alpha^(gamma+1)) / (1 - alpha) tokens on average, alpha = sum min(p, q).
//
//   SpecSimResult r = simulate_speculation(p, q, /*gamma=*/4, /*steps=*/100000, /*seed=*/1);
//   r.check.p_value;        // chi-square of the emitted tokens against p
//   r.tokens_per_pass;      // vs expected_tokens_per_pass(r.alpha, 4)
//   auto pts = sweep_acceptance({0.6, 0.8}, {1, 2, 4}, 20000, 32, 1);
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "plan/stats.h"

namespace ridge::plan {

struct DistributionPair {
  std::vector<double> p;  // target
  std::vector<double> q;  // draft
};

// The expected acceptance rate sum_x min(p(x), q(x)) = 1 - TV(p, q).
double acceptance_rate(std::span<const double> p, std::span<const double> q);

// Tokens one target pass yields on average when each drafted token is accepted
// independently with probability alpha: (1 - alpha^(gamma+1)) / (1 - alpha); gamma + 1 at
// alpha = 1. The engine's draft-length policy uses the same formula
// (engine/draft_length.h, expected_tokens_per_step); this is that function.
double expected_tokens_per_pass(double alpha, int gamma);

// A random pair over n_vocab tokens (>= 2) with acceptance rate exactly alpha in [0, 1]:
// p = alpha c + (1 - alpha) a, q = alpha c + (1 - alpha) b, where c spans every token and
// a and b live on disjoint halves of the vocabulary, so sum min(p, q) = alpha.
DistributionPair random_pair_with_overlap(int n_vocab, double alpha, uint64_t seed);

// Checks a user-given distribution: >= 2 entries, finite, non-negative, summing to 1
// within 1e-3. Returns it renormalized to sum exactly 1. Throws ridge::Error naming `what`.
std::vector<double> checked_distribution(std::span<const double> values, const char* what);

struct SpecSimResult {
  int gamma = 0;
  int64_t steps = 0;                // target passes simulated
  int64_t tokens = 0;               // tokens emitted
  std::vector<int64_t> counts;      // [n_vocab] emitted tokens
  std::vector<double> empirical;    // counts / tokens
  ChiSquare check;                  // counts against p
  double tv_to_target = 0.0;        // TV(empirical, p)
  double alpha = 0.0;               // sum min(p, q)
  double measured_acceptance = 0.0; // accepted / drafted tokens tested
  double tokens_per_pass = 0.0;     // tokens / steps
  double tokens_per_pass_stderr = 0.0;
  double expected_tokens_per_pass = 0.0;
};

// Throws ridge::Error for mismatched sizes, gamma < 0 or steps < 1.
SpecSimResult simulate_speculation(std::span<const double> p, std::span<const double> q, int gamma,
                                   int64_t steps, uint64_t seed);

struct SweepPoint {
  double alpha = 0.0;  // designed acceptance rate
  int gamma = 0;
  double measured_alpha = 0.0;
  double tokens_per_pass = 0.0;
  double standard_error = 0.0;  // of tokens_per_pass
  double expected = 0.0;
  double z() const { return standard_error > 0 ? (tokens_per_pass - expected) / standard_error : 0.0; }
};

// For every (alpha, gamma): a random pair with that overlap, `steps` passes.
std::vector<SweepPoint> sweep_acceptance(std::span<const double> alphas, std::span<const int> gammas,
                                         int64_t steps, int n_vocab, uint64_t seed);

}  // namespace ridge::plan
