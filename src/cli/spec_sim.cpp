// `ridge spec-sim`: simulates speculative decoding's accept/reject rule (the engine's own,
// engine/speculative.h) on a target p and draft q, given as comma lists or drawn at random
// with a chosen acceptance rate; checks that the output follows p (chi-square, total
// variation) and sweeps acceptance rate x draft length, comparing measured tokens per
// target pass with (1 - alpha^(gamma+1)) / (1 - alpha). --json feeds scripts/plot-spec-sim.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "plan/spec_sim.h"
#include "plan/units.h"

namespace ridge::cli {
namespace {

struct SpecSimOptions {
  std::vector<double> p;
  std::vector<double> q;
  int vocab = 8;
  double alpha = -1.0;  // unset: 0.7 unless --tv is given
  double tv = -1.0;
  int gamma = 4;
  int64_t steps = 100000;
  uint64_t seed = 1;
  std::vector<double> alphas = {0.5, 0.6, 0.7, 0.8, 0.9, 0.95};
  std::vector<int> gammas = {1, 2, 3, 4, 5, 6, 8};
  int64_t sweep_steps = 0;  // 0: --steps
  int sweep_vocab = 32;
  bool no_sweep = false;
  bool json = false;
};

// p-values below this say the output does not follow p (fixed seeds make runs repeatable).
constexpr double kSignificance = 1e-3;

plan::DistributionPair pick_distributions(const SpecSimOptions& opt) {
  if (!opt.p.empty() || !opt.q.empty()) {
    if (opt.p.empty() || opt.q.empty()) throw Error("spec-sim: give both --p and --q, or neither (random pair)");
    if (opt.alpha >= 0 || opt.tv >= 0) throw Error("spec-sim: --alpha/--tv pick a random pair; they cannot go with --p/--q");
    plan::DistributionPair pair{plan::checked_distribution(opt.p, "--p"), plan::checked_distribution(opt.q, "--q")};
    if (pair.p.size() != pair.q.size())
      throw Error(str_cat("spec-sim: --p has ", pair.p.size(), " probabilities but --q has ", pair.q.size()));
    return pair;
  }
  if (opt.alpha >= 0 && opt.tv >= 0) throw Error("spec-sim: give --alpha or --tv, not both (alpha = 1 - tv)");
  double alpha = opt.alpha >= 0 ? opt.alpha : opt.tv >= 0 ? 1.0 - opt.tv : 0.7;
  if (!(alpha >= 0.0 && alpha <= 1.0))
    throw Error(str_cat("spec-sim: the acceptance rate must be in [0, 1], got ", alpha));
  return plan::random_pair_with_overlap(opt.vocab, alpha, opt.seed);
}

nlohmann::json run_json(const plan::DistributionPair& pair, const plan::SpecSimResult& r) {
  return {{"p", pair.p}, {"q", pair.q}, {"gamma", r.gamma}, {"steps", r.steps}, {"tokens", r.tokens},
          {"counts", r.counts}, {"empirical", r.empirical}, {"alpha", r.alpha},
          {"measured_acceptance", r.measured_acceptance},
          {"chi_square", {{"statistic", std::isfinite(r.check.statistic) ? nlohmann::json(r.check.statistic) : nlohmann::json(nullptr)},
                          {"dof", r.check.dof}, {"p_value", r.check.p_value}, {"pooled_bins", r.check.pooled_bins}}},
          {"tv_to_target", r.tv_to_target},
          {"tokens_per_pass", r.tokens_per_pass},
          {"tokens_per_pass_stderr", r.tokens_per_pass_stderr},
          {"expected_tokens_per_pass", r.expected_tokens_per_pass},
          {"consistent_with_target", r.check.p_value >= kSignificance}};
}

void run_spec_sim(const SpecSimOptions& opt) {
  if (opt.steps < 1) throw Error(str_cat("--steps ", opt.steps, ": must be at least 1"));
  if (opt.sweep_steps < 0) throw Error(str_cat("--sweep-steps ", opt.sweep_steps, ": must be at least 1"));
  if (opt.gamma < 0) throw Error(str_cat("--gamma ", opt.gamma, ": must be >= 0"));
  for (int g : opt.gammas)
    if (g < 0) throw Error(str_cat("--gammas: draft length ", g, " must be >= 0"));
  for (double a : opt.alphas)
    if (!(a >= 0.0 && a <= 1.0)) throw Error(str_cat("--alphas: acceptance rate ", a, " must be in [0, 1]"));
  const plan::DistributionPair pair = pick_distributions(opt);
  const plan::SpecSimResult r = plan::simulate_speculation(pair.p, pair.q, opt.gamma, opt.steps, opt.seed);
  std::vector<plan::SweepPoint> sweep;
  const int64_t sweep_steps = opt.sweep_steps > 0 ? opt.sweep_steps : opt.steps;
  if (!opt.no_sweep) sweep = plan::sweep_acceptance(opt.alphas, opt.gammas, sweep_steps, opt.sweep_vocab, opt.seed + 1000);

  if (opt.json) {
    nlohmann::json points = nlohmann::json::array();
    for (const plan::SweepPoint& s : sweep)
      points.push_back({{"alpha", s.alpha}, {"gamma", s.gamma}, {"measured_alpha", s.measured_alpha},
                        {"tokens_per_pass", s.tokens_per_pass}, {"stderr", s.standard_error},
                        {"expected", s.expected}, {"z", s.z()}});
    nlohmann::json out = {{"seed", opt.seed}, {"significance", kSignificance}, {"distribution", run_json(pair, r)},
                          {"sweep", {{"steps_per_point", sweep_steps}, {"vocab", opt.sweep_vocab}, {"points", points}}}};
    std::cout << out.dump(2) << "\n";
    return;
  }

  std::printf("target p and draft q over %zu tokens; acceptance rate alpha = sum min(p, q) = %.4f "
              "(total variation %.4f)\n",
              pair.p.size(), r.alpha, 1.0 - r.alpha);
  std::printf("%s target passes, gamma = %d drafted tokens each, seed %llu: %s tokens emitted\n\n",
              plan::format_count(r.steps).c_str(), r.gamma, static_cast<unsigned long long>(opt.seed),
              plan::format_count(r.tokens).c_str());
  const size_t shown = std::min<size_t>(pair.p.size(), 32);
  std::printf("%6s %10s %10s %10s %10s\n", "token", "target p", "emitted", "draft q", "count");
  for (size_t j = 0; j < shown; ++j)
    std::printf("%6zu %10.4f %10.4f %10.4f %10lld\n", j, pair.p[j], r.empirical[j], pair.q[j],
                static_cast<long long>(r.counts[j]));
  if (shown < pair.p.size()) std::printf("%6s (%zu more tokens; --json has them all)\n", "...", pair.p.size() - shown);
  std::printf("\nchi-square %.3f with %d degrees of freedom%s: p-value %.4f -> %s\n", r.check.statistic, r.check.dof,
              r.check.pooled_bins > 0 ? str_cat(" (", r.check.pooled_bins, " rare tokens pooled)").c_str() : "",
              r.check.p_value,
              r.check.p_value >= kSignificance ? "consistent with p" : "the output does NOT follow p");
  std::printf("total variation(emitted, p) = %.5f\n", r.tv_to_target);
  std::printf("accepted drafts: %.4f of those tested (alpha = %.4f)\n", r.measured_acceptance, r.alpha);
  std::printf("tokens per target pass: %.4f +- %.4f measured; (1 - alpha^(gamma+1)) / (1 - alpha) = %.4f\n",
              r.tokens_per_pass, r.tokens_per_pass_stderr, r.expected_tokens_per_pass);
  if (sweep.empty()) return;

  std::printf("\nsweep: random pairs over %d tokens, %s passes per point\n", opt.sweep_vocab,
              plan::format_count(sweep_steps).c_str());
  std::printf("%6s %6s %14s %12s %9s %9s %7s\n", "alpha", "gamma", "accepted", "tokens/pass", "stderr", "formula", "z");
  for (const plan::SweepPoint& s : sweep)
    std::printf("%6.2f %6d %14.4f %12.4f %9.4f %9.4f %7.2f\n", s.alpha, s.gamma, s.measured_alpha, s.tokens_per_pass,
                s.standard_error, s.expected, s.z());
}

}  // namespace

void add_spec_sim_command(CLI::App& app) {
  auto opt = std::make_shared<SpecSimOptions>();
  CLI::App* cmd = app.add_subcommand("spec-sim", "Simulate speculative decoding's accept/reject rule");
  cmd->add_option("--p", opt->p, "Target distribution, comma-separated (e.g. 0.5,0.3,0.2)")->delimiter(',');
  cmd->add_option("--q", opt->q, "Draft distribution, comma-separated, same length as --p")->delimiter(',');
  cmd->add_option("--vocab", opt->vocab, "Tokens of the random pair (without --p/--q)")->capture_default_str();
  cmd->add_option("--alpha", opt->alpha, "Acceptance rate sum min(p, q) of the random pair (default 0.7)");
  cmd->add_option("--tv", opt->tv, "Total-variation distance of the random pair (= 1 - alpha)");
  cmd->add_option("-g,--gamma", opt->gamma, "Drafted tokens per target pass")->capture_default_str();
  cmd->add_option("-n,--steps", opt->steps, "Target passes to simulate")->capture_default_str();
  cmd->add_option("-s,--seed", opt->seed, "RNG seed")->capture_default_str();
  cmd->add_option("--alphas", opt->alphas, "Sweep: acceptance rates")->delimiter(',')->capture_default_str();
  cmd->add_option("--gammas", opt->gammas, "Sweep: draft lengths")->delimiter(',')->capture_default_str();
  cmd->add_option("--sweep-steps", opt->sweep_steps, "Sweep: passes per point (default: --steps)");
  cmd->add_option("--sweep-vocab", opt->sweep_vocab, "Sweep: tokens of each random pair")->capture_default_str();
  cmd->add_flag("--no-sweep", opt->no_sweep, "Skip the sweep");
  cmd->add_flag("--json", opt->json, "Print one JSON object (for scripts/plot-spec-sim)");
  cmd->callback([opt] { run_spec_sim(*opt); });
}

}  // namespace ridge::cli
