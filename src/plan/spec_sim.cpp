#include "plan/spec_sim.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "engine/draft_length.h"
#include "engine/sampler.h"
#include "engine/speculative.h"

namespace ridge::plan {
namespace {

// Positive random weights over [begin, end) of a vocabulary, normalized: -log(u) draws are
// exponential, so the result is uniform on the simplex (Dirichlet(1, ..., 1)).
std::vector<double> random_simplex(Sampler& rng, int n_vocab, int begin, int end) {
  std::vector<double> w(n_vocab, 0.0);
  double total = 0.0;
  for (int j = begin; j < end; ++j) total += (w[j] = -std::log1p(-rng.uniform()) + 1e-12);
  for (double& x : w) x /= total;
  return w;
}

}  // namespace

double acceptance_rate(std::span<const double> p, std::span<const double> q) {
  if (p.size() != q.size())
    throw Error(str_cat("acceptance_rate: target has ", p.size(), " tokens, draft ", q.size()));
  double alpha = 0.0;
  for (size_t j = 0; j < p.size(); ++j) alpha += std::min(p[j], q[j]);
  return alpha;
}

double expected_tokens_per_pass(double alpha, int gamma) { return expected_tokens_per_step(alpha, gamma); }

DistributionPair random_pair_with_overlap(int n_vocab, double alpha, uint64_t seed) {
  if (n_vocab < 2) throw Error(str_cat("--vocab ", n_vocab, ": need at least 2 tokens"));
  if (!(alpha >= 0.0 && alpha <= 1.0))
    throw Error(str_cat("acceptance rate ", alpha, " must be in [0, 1]"));
  Sampler rng(SamplingParams{.seed = seed});
  const int half = n_vocab / 2;
  const std::vector<double> common = random_simplex(rng, n_vocab, 0, n_vocab);
  const std::vector<double> only_p = random_simplex(rng, n_vocab, 0, half);
  const std::vector<double> only_q = random_simplex(rng, n_vocab, half, n_vocab);
  DistributionPair out{std::vector<double>(n_vocab), std::vector<double>(n_vocab)};
  for (int j = 0; j < n_vocab; ++j) {
    out.p[j] = alpha * common[j] + (1.0 - alpha) * only_p[j];
    out.q[j] = alpha * common[j] + (1.0 - alpha) * only_q[j];
  }
  return out;
}

std::vector<double> checked_distribution(std::span<const double> values, const char* what) {
  if (values.size() < 2) throw Error(str_cat(what, ": need at least 2 probabilities, got ", values.size()));
  double total = 0.0;
  for (size_t j = 0; j < values.size(); ++j) {
    if (!std::isfinite(values[j]) || values[j] < 0.0)
      throw Error(str_cat(what, ": entry ", j, " is ", values[j], "; probabilities must be finite and >= 0"));
    total += values[j];
  }
  if (std::fabs(total - 1.0) > 1e-3)
    throw Error(str_cat(what, ": probabilities sum to ", total, ", not 1"));
  std::vector<double> out(values.begin(), values.end());
  for (double& x : out) x /= total;
  return out;
}

SpecSimResult simulate_speculation(std::span<const double> p, std::span<const double> q, int gamma,
                                   int64_t steps, uint64_t seed) {
  if (p.size() != q.size())
    throw Error(str_cat("spec-sim: the target has ", p.size(), " tokens but the draft has ", q.size()));
  if (gamma < 0) throw Error(str_cat("--gamma ", gamma, ": must be >= 0"));
  if (steps < 1) throw Error(str_cat("--steps ", steps, ": must be >= 1"));
  const size_t n_vocab = p.size();

  // The same p and q at every position, laid out as the engine would pass them.
  std::vector<double> target, draft;
  for (int i = 0; i <= gamma; ++i) target.insert(target.end(), p.begin(), p.end());
  for (int i = 0; i < gamma; ++i) draft.insert(draft.end(), q.begin(), q.end());
  std::vector<int32_t> drafted(gamma);

  SpecSimResult r;
  r.gamma = gamma;
  r.steps = steps;
  r.counts.assign(n_vocab, 0);
  r.alpha = acceptance_rate(p, q);
  Sampler rng(SamplingParams{.seed = seed});
  int64_t tested = 0, accepted = 0;
  double sum_sq = 0.0;
  for (int64_t s = 0; s < steps; ++s) {
    for (int i = 0; i < gamma; ++i) drafted[i] = sample_categorical<double>(q, rng.uniform());
    const SpeculativeStep step = verify_draft<double>(target, draft, drafted, rng);
    for (int i = 0; i < step.n_accepted; ++i) ++r.counts[drafted[i]];
    ++r.counts[step.next_token];
    const int emitted = step.n_accepted + 1;
    r.tokens += emitted;
    sum_sq += static_cast<double>(emitted) * emitted;
    accepted += step.n_accepted;
    tested += std::min(gamma, step.n_accepted + 1);  // a rejection ends the tests
  }
  r.empirical.resize(n_vocab);
  for (size_t j = 0; j < n_vocab; ++j) r.empirical[j] = static_cast<double>(r.counts[j]) / static_cast<double>(r.tokens);
  r.check = chi_square_test(r.counts, p);
  r.tv_to_target = total_variation(r.empirical, p);
  r.measured_acceptance = tested > 0 ? static_cast<double>(accepted) / static_cast<double>(tested) : 0.0;
  const double n = static_cast<double>(steps);
  r.tokens_per_pass = static_cast<double>(r.tokens) / n;
  const double variance = std::max(0.0, sum_sq / n - r.tokens_per_pass * r.tokens_per_pass);
  r.tokens_per_pass_stderr = std::sqrt(variance / n);
  r.expected_tokens_per_pass = expected_tokens_per_pass(r.alpha, gamma);
  return r;
}

std::vector<SweepPoint> sweep_acceptance(std::span<const double> alphas, std::span<const int> gammas,
                                         int64_t steps, int n_vocab, uint64_t seed) {
  std::vector<SweepPoint> out;
  uint64_t stream = seed;
  for (double alpha : alphas)
    for (int gamma : gammas) {
      const DistributionPair pair = random_pair_with_overlap(n_vocab, alpha, stream++);
      const SpecSimResult r = simulate_speculation(pair.p, pair.q, gamma, steps, stream++);
      SweepPoint pt;
      pt.alpha = alpha;
      pt.gamma = gamma;
      pt.measured_alpha = r.measured_acceptance;
      pt.tokens_per_pass = r.tokens_per_pass;
      pt.standard_error = r.tokens_per_pass_stderr;
      pt.expected = r.expected_tokens_per_pass;
      out.push_back(pt);
    }
  return out;
}

}  // namespace ridge::plan
