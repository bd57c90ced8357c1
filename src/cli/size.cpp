// `ridge size MODEL --gpus 2x80GB --ctx 8192 --weights bf16 --kv fp16`: weight memory, KV
// bytes per token and per conversation, and how many conversations fit, with the
// arithmetic shown line by line (or, with --json, as one object). MODEL is a preset
// (`ridge size --list`) or a GGUF file / cached model name.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "plan/model_shape.h"
#include "plan/sizing.h"

namespace ridge::cli {
namespace {

struct SizeOptions {
  std::string model;
  std::string gpus;
  int64_t ctx = 4096;
  std::string weights;  // empty: bf16 for presets, file for GGUF
  std::string kv = "fp16";
  std::string reserve = "none";
  int tp = 1;
  bool json = false;
  bool list = false;
};

void print_presets() {
  std::printf("%-16s %-18s %15s %6s %5s %4s %6s  %s\n", "preset", "model", "params", "layers", "heads", "kv", "d_head",
              "sliding window");
  for (const plan::ModelPreset& p : plan::model_presets()) {
    std::string window = "-";
    if (p.window > 0)
      window = p.global_every > 0 ? str_cat(p.window, " tokens, ", p.global_every - 1, " of every ", p.global_every, " layers")
                                  : str_cat(p.window, " tokens, every layer");
    std::printf("%-16s %-18s %15s %6d %5d %4d %6d  %s\n", std::string(p.id).c_str(), std::string(p.display).c_str(),
                plan::format_count(plan::count_params(p)).c_str(), p.n_layer, p.n_head, p.n_kv_head, p.d_head,
                window.c_str());
  }
}

void print_lines(const std::vector<plan::ArithmeticLine>& lines) {
  size_t label_width = 0, formula_width = 0;
  for (const auto& l : lines) {
    label_width = std::max(label_width, l.label.size());
    formula_width = std::max(formula_width, l.formula.size());
  }
  for (const auto& l : lines)
    std::printf("%-*s  %-*s  = %s\n", static_cast<int>(label_width), l.label.c_str(), static_cast<int>(formula_width),
                l.formula.c_str(), l.result.c_str());
}

nlohmann::json lines_json(const std::vector<plan::ArithmeticLine>& lines) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& l : lines) out.push_back({{"label", l.label}, {"formula", l.formula}, {"result", l.result}});
  return out;
}

void run_size(const SizeOptions& opt) {
  if (opt.list) {
    print_presets();
    return;
  }
  if (opt.model.empty()) throw Error("size: give a MODEL (a preset, see --list, or a GGUF file)");
  const plan::ModelShape model = plan::load_model_shape(opt.model, resolve_model_path);
  if (plan::find_model_preset(opt.model) != nullptr) {
    // A preset's name may also be a cached model's (gemma3-270m): the preset wins; say so.
    try {
      const std::string cached = resolve_model_path(opt.model);
      std::fprintf(stderr, "size: '%s' is a preset; for the cached GGUF of that name: ridge size %s\n",
                   opt.model.c_str(), cached.c_str());
    } catch (const Error&) {
    }
  }
  plan::Deployment d;
  d.ctx = opt.ctx;
  d.weights = plan::parse_weight_format(opt.weights.empty() ? (model.file_weight_bytes > 0 ? "file" : "bf16")
                                                            : opt.weights);
  d.kv = plan::parse_kv_format(opt.kv);
  d.reserve = plan::parse_reserve(opt.reserve);
  if (!opt.gpus.empty()) d.gpus = plan::parse_gpus(opt.gpus);
  d.tp = opt.tp;
  const plan::SizeReport r = plan::compute_size(model, d);

  if (opt.json) {
    nlohmann::json windows = nlohmann::json::object();
    for (const auto& [window, layers] : model.layers_by_window()) windows[std::to_string(window)] = layers;
    nlohmann::json out = {
        {"model", {{"id", model.id}, {"name", model.display}, {"source", model.source}, {"params", model.n_params},
                   {"n_layer", model.n_layer}, {"n_head", model.n_head}, {"n_kv_head", model.n_kv_head},
                   {"d_head", model.d_head}, {"layers_by_window", windows}, {"note", model.note}}},
        {"deployment", {{"ctx", d.ctx}, {"weights", d.weights.name}, {"kv", d.kv.name},
                        {"reserve", d.reserve.describe()}}},
        {"units", "bytes; GB = 1e9 bytes, GiB = 2^30 bytes"},
        {"weight_bytes", r.weight_bytes},
        {"weight_bytes_per_param", r.weight_bytes_per_param},
        {"kv_bytes_per_token", r.kv_bytes_per_token},
        {"kv_bytes_per_conversation", r.kv_bytes_per_conversation},
        {"state_bytes_per_sequence", r.state_bytes_per_sequence},
        {"arithmetic", lines_json(r.lines)},
    };
    if (d.tp > 1) {
      out["deployment"]["tp"] = d.tp;
      out["rank_weight_bytes"] = r.rank_weight_bytes;
      out["rank_kv_bytes_per_token"] = r.rank_kv_bytes_per_token;
      out["rank_kv_bytes_per_conversation"] = r.rank_kv_bytes_per_conversation;
    }
    if (d.gpus) {
      out["deployment"]["gpus"] = {{"count", d.gpus->count}, {"bytes_each", d.gpus->bytes_each}};
      out["total_bytes"] = r.total_bytes;
      out["reserve_bytes"] = r.reserve_bytes;
      out["free_bytes"] = r.free_bytes;
      out["max_conversations"] = r.max_conversations;
    }
    std::cout << out.dump(2) << "\n";
    return;
  }

  std::printf("%s (%s; %s)\n  %s\n", model.display.c_str(), model.id.c_str(), model.source.c_str(), model.summary().c_str());
  if (!model.note.empty()) std::printf("  note: %s\n", model.note.c_str());
  std::printf("deployment: %s%s-token conversations, weights %s (%s), KV cache %s (%s), reserve %s\n",
              d.gpus ? str_cat(d.gpus->count, " x ", plan::format_both(d.gpus->bytes_each), " GPUs, ").c_str() : "",
              plan::format_count(d.ctx).c_str(), d.weights.name.c_str(), d.weights.detail.c_str(), d.kv.name.c_str(),
              d.kv.detail.c_str(), d.reserve.describe().c_str());
  std::printf("units: GB = 10^9 bytes, GiB = 2^30 bytes; KiB = 1024 bytes\n\n");
  print_lines(r.lines);
  if (!d.gpus) std::printf("\n(give --gpus, e.g. --gpus 2x80GB, for how many conversations fit)\n");
}

}  // namespace

void add_size_command(CLI::App& app) {
  auto opt = std::make_shared<SizeOptions>();
  CLI::App* cmd = app.add_subcommand("size", "Memory for weights and KV cache, and how many conversations fit");
  cmd->add_option("model,-m,--model", opt->model, "Preset (see --list) or GGUF file / cached model name");
  cmd->add_option("--gpus", opt->gpus, "GPUs as COUNTxSIZE, e.g. 2x80GB or 8x24GiB (GB = 1e9 B, GiB = 2^30 B)");
  cmd->add_option("-c,--ctx", opt->ctx, "Tokens per conversation")->capture_default_str();
  cmd->add_option("--weights", opt->weights,
                  "Weight format: bf16, fp16, fp32, int8, int4, file (as stored), or a GGUF type like q4_K "
                  "(default: file for GGUF, bf16 for presets)");
  cmd->add_option("--kv", opt->kv, "KV cache type: fp16, bf16, q8_0, q4_0 (ridge's --kv-type), int8, fp32")->capture_default_str();
  cmd->add_option("--reserve", opt->reserve, "Memory kept from the KV cache: 10%, 4GiB, or none")->capture_default_str();
  cmd->add_option("--tp", opt->tp,
                  "Tensor-parallel ranks (ridge --tp): memory per rank; --gpus then counts one device or host per rank")
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "Print one JSON object");
  cmd->add_flag("--list", opt->list, "List the built-in model presets");
  cmd->callback([opt] { run_size(*opt); });
}

}  // namespace ridge::cli
