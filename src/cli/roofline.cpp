// `ridge roofline MODEL --device h100-sxm`: arithmetic intensity of a decode step against
// batch size on a device's roofline, the ridge point, the batch where decode turns
// compute-bound and the best single-user tokens/s, as a table or (--json) for
// scripts/plot-roofline. `--device this` measures this machine (see plan/probe.h).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "plan/model_shape.h"
#include "plan/probe.h"
#include "plan/roofline.h"

namespace ridge::cli {
namespace {

struct RooflineOptions {
  std::string model;
  std::string device = "h100-sxm";
  std::string weights;  // empty: bf16 for presets, file for GGUF
  std::string kv = "fp16";
  int64_t ctx = 1024;
  int64_t max_batch = 1024;
  int threads = 0;
  double peak_tflops = 0.0;    // overrides
  double bandwidth_gbs = 0.0;
  bool json = false;
};

plan::DeviceSpec pick_device(const RooflineOptions& opt) {
  plan::DeviceSpec d;
  if (opt.device == "this") {
    if (opt.threads < 0) throw Error(str_cat("--threads ", opt.threads, ": must be >= 0"));
    const int threads = opt.threads > 0 ? opt.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    d = plan::this_machine(threads);
  } else if (const plan::DeviceSpec* preset = plan::find_device_preset(opt.device)) {
    d = *preset;
  } else {
    throw Error(str_cat("--device '", opt.device, "': unknown device (presets: ", plan::device_preset_ids(),
                        "; or 'this' to measure this machine)"));
  }
  if (opt.peak_tflops < 0 || opt.bandwidth_gbs < 0) throw Error("--peak-tflops and --bandwidth-gbs must be positive");
  if (opt.peak_tflops > 0) {
    d.peak_flops = opt.peak_tflops * 1e12;
    d.source += "; peak given with --peak-tflops";
  }
  if (opt.bandwidth_gbs > 0) {
    d.bandwidth = opt.bandwidth_gbs * 1e9;
    d.source += "; bandwidth given with --bandwidth-gbs";
  }
  return d;
}

nlohmann::json point_json(const plan::RooflinePoint& p) {
  return {{"batch", p.batch}, {"flops", p.flops}, {"bytes", p.bytes}, {"intensity", p.intensity},
          {"attainable_flops", p.attainable_flops}, {"tokens_per_s", p.tokens_per_s},
          {"compute_bound", p.compute_bound}, {"fits_in_memory", p.fits_in_memory}};
}

std::string flops_text(double flops) {
  return flops >= 1e13 ? str_cat(plan::format_fixed(flops / 1e12, 1), " TFLOP/s")
                       : str_cat(plan::format_fixed(flops / 1e9, 1), " GFLOP/s");
}

std::string tokens_rate(double v) { return plan::format_fixed(v, v < 100 ? 1 : 0); }

void run_roofline(const RooflineOptions& opt) {
  if (opt.model.empty()) throw Error("roofline: give a MODEL (a preset, see `ridge size --list`, or a GGUF file)");
  plan::RooflineInput in;
  in.model = plan::load_model_shape(opt.model, resolve_model_path);
  in.weights = plan::parse_weight_format(opt.weights.empty() ? (in.model.file_weight_bytes > 0 ? "file" : "bf16")
                                                             : opt.weights);
  in.kv = plan::parse_kv_format(opt.kv);
  in.ctx = opt.ctx;
  in.max_batch = opt.max_batch;
  if (in.ctx < 0) throw Error(str_cat("--ctx ", in.ctx, ": the context must be 0 or more tokens"));
  if (in.max_batch < 1) throw Error(str_cat("--max-batch ", in.max_batch, ": must be at least 1"));
  in.device = pick_device(opt);
  const plan::RooflineReport r = plan::compute_roofline(in);
  plan::RooflineInput weights_only = in;
  weights_only.ctx = 0;
  const plan::RooflineReport r0 = plan::compute_roofline(weights_only);
  const plan::DeviceSpec& dev = in.device;
  const plan::ModelShape& m = in.model;

  if (opt.json) {
    nlohmann::json points = nlohmann::json::array(), curve = nlohmann::json::array();
    for (const auto& p : r.points) points.push_back(point_json(p));
    for (const auto& p : r.curve) curve.push_back(point_json(p));
    nlohmann::json out = {
        {"model", {{"id", m.id}, {"name", m.display}, {"params", m.n_params}}},
        {"device", {{"id", dev.id}, {"name", dev.display}, {"peak_flops", dev.peak_flops},
                    {"bandwidth", dev.bandwidth}, {"memory_bytes", dev.memory_bytes},
                    {"precision", dev.precision}, {"source", dev.source}}},
        {"weights", in.weights.name}, {"kv", in.kv.name}, {"ctx", in.ctx},
        {"units", "FLOP/s, bytes/s, bytes; GB = 1e9 bytes"},
        {"weight_bytes", r.weight_bytes},
        {"kv_bytes_per_sequence", r.kv_bytes_per_sequence},
        {"flops_per_token", r.flops_per_token},
        {"ridge_point", r.ridge_point},
        {"crossover_batch", std::isfinite(r.crossover_batch) ? nlohmann::json(r.crossover_batch) : nlohmann::json(nullptr)},
        {"crossover_batch_weights_only", r0.crossover_batch},
        {"single_user_tokens_per_s", r.single_user_tokens_per_s},
        {"weights_only_tokens_per_s", r.weights_only_tokens_per_s},
        {"max_batch_in_memory", r.max_batch_in_memory},
        {"points", points},
        {"curve", curve},
    };
    std::cout << out.dump(2) << "\n";
    return;
  }

  std::printf("%s (%s) on %s\n", m.display.c_str(), m.summary().c_str(), dev.display.c_str());
  std::printf("device: %s (%s), %s/s memory bandwidth, %s memory\n  source: %s\n",
              flops_text(dev.peak_flops).c_str(), dev.precision.c_str(),
              plan::format_si(dev.bandwidth).c_str(), plan::format_si(dev.memory_bytes).c_str(), dev.source.c_str());
  std::printf("weights %s (%s), KV cache %s, %s tokens of context per sequence; GB = 10^9 bytes\n\n",
              in.weights.name.c_str(), in.weights.detail.c_str(), in.kv.name.c_str(), plan::format_count(in.ctx).c_str());

  const double gflop = 1e9;
  std::printf("weights read per step      %s\n", plan::format_si(r.weight_bytes).c_str());
  std::printf("KV read per sequence       %s (%s tokens of history)\n", plan::format_si(r.kv_bytes_per_sequence).c_str(),
              plan::format_count(in.ctx).c_str());
  std::printf("FLOPs per token            2 x %s params + attention over the context = %s GFLOP\n",
              plan::format_count(m.n_params).c_str(), plan::format_fixed(r.flops_per_token / gflop, 2).c_str());
  std::printf("ridge point                %s / %s/s = %s FLOP/byte\n", flops_text(dev.peak_flops).c_str(),
              plan::format_si(dev.bandwidth).c_str(), plan::format_fixed(r.ridge_point, 1).c_str());
  if (std::isfinite(r.crossover_batch))
    std::printf("compute-bound from batch   ridge x weight bytes / (FLOPs/token - ridge x KV bytes/seq) = %s -> %lld\n",
                plan::format_fixed(r.crossover_batch, 1).c_str(), static_cast<long long>(std::ceil(r.crossover_batch)));
  else
    std::printf("compute-bound from batch   never at this context: each sequence's KV reads (%s FLOP/byte) stay "
                "below the ridge point\n",
                plan::format_fixed(r.flops_per_token / r.kv_bytes_per_sequence, 1).c_str());
  std::printf("  weights only (ctx 0)     ridge x weight bytes / FLOPs per token = %s -> %lld\n",
              plan::format_fixed(r0.crossover_batch, 1).c_str(), static_cast<long long>(std::ceil(r0.crossover_batch)));
  std::printf("best single-user decode    %s/s / (%s weights + %s KV) = %s tokens/s\n", plan::format_si(dev.bandwidth).c_str(),
              plan::format_si(r.weight_bytes).c_str(), plan::format_si(r.kv_bytes_per_sequence).c_str(),
              tokens_rate(r.single_user_tokens_per_s).c_str());
  std::printf("  weights only (ctx 0)     %s/s / %s = %s tokens/s\n", plan::format_si(dev.bandwidth).c_str(),
              plan::format_si(r.weight_bytes).c_str(), tokens_rate(r.weights_only_tokens_per_s).c_str());
  if (r.max_batch_in_memory >= 0)
    std::printf("max batch in memory        (%s - %s) / %s = %lld sequences\n", plan::format_si(dev.memory_bytes).c_str(),
                plan::format_si(r.weight_bytes).c_str(), plan::format_si(r.kv_bytes_per_sequence).c_str(),
                static_cast<long long>(r.max_batch_in_memory));

  const bool giga = dev.peak_flops < 1e13;  // CPUs: GFLOP/s reads better than 0.04 TFLOP/s
  std::printf("\n%7s %10s %8s %12s %12s %14s %6s\n", "batch", "FLOP/byte", "bound", giga ? "GFLOP/s" : "TFLOP/s",
              "tokens/s", "tokens/s/user", "fits");
  for (const plan::RooflinePoint& p : r.points)
    std::printf("%7lld %10.1f %8s %12.2f %12s %14s %6s\n", static_cast<long long>(p.batch), p.intensity,
                p.compute_bound ? "compute" : "memory", p.attainable_flops / (giga ? 1e9 : 1e12), tokens_rate(p.tokens_per_s).c_str(),
                tokens_rate(p.tokens_per_s / static_cast<double>(p.batch)).c_str(), p.fits_in_memory ? "yes" : "no");
}

}  // namespace

void add_roofline_command(CLI::App& app) {
  auto opt = std::make_shared<RooflineOptions>();
  CLI::App* cmd = app.add_subcommand("roofline", "Decode's roofline: intensity vs batch size, ridge point, best tokens/s");
  cmd->add_option("model,-m,--model", opt->model, "Preset (see `ridge size --list`) or GGUF file / cached model name");
  cmd->add_option("-d,--device", opt->device,
                  "h100-sxm, h200, a100-80gb-sxm, rtx4090, or 'this' (measures this machine)")
      ->capture_default_str();
  cmd->add_option("--weights", opt->weights,
                  "Weight format: bf16, fp16, fp32, int8, int4, file, or a GGUF type like q4_K "
                  "(default: file for GGUF, bf16 for presets)");
  cmd->add_option("--kv", opt->kv, "KV cache type: fp16, bf16, int8, fp32")->capture_default_str();
  cmd->add_option("-c,--ctx", opt->ctx, "Tokens of history per sequence (KV read per step)")->capture_default_str();
  cmd->add_option("--max-batch", opt->max_batch, "Largest batch in the table")->capture_default_str();
  cmd->add_option("-t,--threads", opt->threads, "Threads for --device this (0: all cores)")->capture_default_str();
  cmd->add_option("--peak-tflops", opt->peak_tflops, "Override the device's peak TFLOP/s");
  cmd->add_option("--bandwidth-gbs", opt->bandwidth_gbs, "Override the device's bandwidth in GB/s (1e9 B/s)");
  cmd->add_flag("--json", opt->json, "Print one JSON object (for scripts/plot-roofline)");
  cmd->callback([opt] { run_roofline(*opt); });
}

}  // namespace ridge::cli
