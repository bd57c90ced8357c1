// `ridge spec-sim`: simulates speculative decoding's accept/reject rule (the engine's own,
// engine/speculative.h) on a target p and draft q, given as comma lists or drawn at random
// with a chosen acceptance rate; checks that the output follows p (chi-square, total
// variation) and sweeps acceptance rate x draft length, comparing measured tokens per
// target pass with (1 - alpha^(gamma+1)) / (1 - alpha). --measured takes a real run's
// figures from `ridge bench --json` and sets them beside the formula and the simulator.
// --json feeds scripts/plot-spec-sim.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
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
  std::string measured;  // `ridge bench --json` output with speculative rows
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

// One speculative tg row of `ridge bench --json`, beside the formula and the simulator.
struct MeasuredPoint {
  std::string label;
  double alpha = 0, gamma = 0, tokens_per_pass = 0, formula = 0;
  double simulated = 0, simulated_stderr = 0;  // the engine's rule on a random pair at (alpha, round(gamma))
  double speedup = 0;
};

std::vector<MeasuredPoint> read_measured(const std::string& path, int64_t steps, uint64_t seed) {
  std::ifstream in(path);
  if (!in) throw Error(str_cat("spec-sim: --measured ", path, ": cannot open"));
  nlohmann::json rows;
  try {
    rows = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat("spec-sim: --measured ", path, ": not JSON (", e.what(), ")"));
  }
  if (!rows.is_array()) throw Error(str_cat("spec-sim: --measured ", path, ": expected the JSON list of `ridge bench --json`"));
  std::vector<MeasuredPoint> out;
  for (const nlohmann::json& r : rows) {
    if (!r.is_object() || !r.contains("spec_method")) continue;
    try {
      MeasuredPoint m;
      m.label = str_cat(r.at("model_type").get<std::string>(), " ", r.at("test").get<std::string>());
      m.alpha = r.at("spec_alpha").get<double>();
      m.gamma = r.at("spec_mean_draft").get<double>();
      m.tokens_per_pass = r.at("spec_tokens_per_step").get<double>();
      m.speedup = r.value("spec_speedup", 0.0);
      m.formula = m.alpha >= 1.0 ? m.gamma + 1.0 : (1.0 - std::pow(m.alpha, m.gamma + 1.0)) / (1.0 - m.alpha);
      const int gamma = static_cast<int>(std::lround(m.gamma));
      const plan::DistributionPair pair = plan::random_pair_with_overlap(32, std::clamp(m.alpha, 0.0, 1.0), seed);
      const plan::SpecSimResult sim = plan::simulate_speculation(pair.p, pair.q, gamma, steps, seed);
      m.simulated = sim.tokens_per_pass;
      m.simulated_stderr = sim.tokens_per_pass_stderr;
      out.push_back(m);
    } catch (const nlohmann::json::exception& e) {
      throw Error(str_cat("spec-sim: --measured ", path, ": a speculative row lacks a field (", e.what(), ")"));
    }
  }
  if (out.empty())
    throw Error(str_cat("spec-sim: --measured ", path, ": no speculative rows (run ridge bench with --spec or --draft)"));
  return out;
}

void run_measured(const SpecSimOptions& opt) {
  const std::vector<MeasuredPoint> points = read_measured(opt.measured, opt.steps, opt.seed);
  if (opt.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const MeasuredPoint& m : points)
      list.push_back({{"label", m.label}, {"alpha", m.alpha}, {"gamma", m.gamma}, {"tokens_per_pass", m.tokens_per_pass},
                      {"formula", m.formula}, {"simulated", m.simulated}, {"simulated_stderr", m.simulated_stderr},
                      {"speedup", m.speedup}});
    std::cout << nlohmann::json{{"seed", opt.seed}, {"measured", list}}.dump(2) << "\n";
    return;
  }
  std::printf("measured by ridge bench (alpha: accepted / (accepted + rejecting steps); gamma: drafted per step)\n");
  std::printf("%-40s %7s %7s %12s %9s %15s %8s\n", "run", "alpha", "gamma", "tokens/pass", "formula", "simulated", "speedup");
  for (const MeasuredPoint& m : points)
    std::printf("%-40s %7.3f %7.2f %12.3f %9.3f %9.3f+-%.3f %7.2fx\n", m.label.c_str(), m.alpha, m.gamma,
                m.tokens_per_pass, m.formula, m.simulated, m.simulated_stderr, m.speedup);
  std::printf("(formula: (1 - alpha^(gamma+1)) / (1 - alpha) at the mean gamma; with adaptive draft lengths gamma "
              "varies, run bench with --draft-fixed for a like-for-like comparison)\n");
}

void run_spec_sim(const SpecSimOptions& opt) {
  if (!opt.measured.empty()) {
    run_measured(opt);
    return;
  }
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
  cmd->add_option("--measured", opt->measured,
                  "Compare a real run instead: `ridge bench --spec/--draft --json` output; its acceptance and "
                  "tokens per target pass beside the formula and the simulator");
  cmd->callback([opt] { run_spec_sim(*opt); });
}

}  // namespace ridge::cli
