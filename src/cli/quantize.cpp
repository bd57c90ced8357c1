// `ridge quantize IN.gguf OUT.gguf TYPE [--method rtn]`: a model in another GGUF type, with
// llama-quantize's per-tensor choices (quant/recipe.h) and its metadata; the output is a
// standard GGUF that llama.cpp loads. Progress on stderr; the input is never overwritten
// and a failed run leaves no output file.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "quant/quantize.h"

namespace ridge::cli {
namespace {

struct QuantizeCliOptions {
  std::string input, output, type;
  std::string method = "rtn";
  int threads = 0;
};

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

void quantize(const QuantizeCliOptions& opt) {
  quant::QuantizeOptions o;
  o.input = resolve_model_path(opt.input);
  o.output = opt.output;
  o.target = quant::parse_quant_target(opt.type);
  o.threads = opt.threads;
  if (opt.method != "rtn") throw Error(str_cat("--method must be rtn, got '", opt.method, "'"));
  o.extra_metadata.push_back({"quantize.method", opt.method});
  std::fprintf(stderr, "quantize: %s -> %s as %s (%s)\n", o.input.c_str(), o.output.c_str(), o.target.name.c_str(),
               opt.method.c_str());
  const quant::QuantizeReport r = quant::quantize_model(o, [](const std::string& line) {
    std::fputs(line.c_str(), stderr);
  });
  for (const std::string& note : r.fallbacks) std::fprintf(stderr, "fallback: %s\n", note.c_str());
  std::fprintf(stderr, "quantize: %d tensors (%d quantized), %s -> %s of tensor data\n", r.n_tensors, r.n_quantized,
               mib(r.input_bytes).c_str(), mib(r.output_bytes).c_str());
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  auto opt = std::make_shared<QuantizeCliOptions>();
  CLI::App* cmd = app.add_subcommand("quantize", "Write a model in another GGUF type (as llama-quantize)");
  cmd->add_option("input", opt->input, "GGUF to read (a file, or a cached model name)")->required();
  cmd->add_option("output", opt->output, "GGUF to write")->required();
  cmd->add_option("type", opt->type, "Target: " + quant::quant_target_names())->required();
  cmd->add_option("--method", opt->method, "rtn (round to nearest)")->capture_default_str();
  cmd->add_option("-t,--threads", opt->threads, "Threads (0: all cores)")->capture_default_str();
  cmd->callback([opt] { quantize(*opt); });
}

}  // namespace ridge::cli
