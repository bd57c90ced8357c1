// `ridge imatrix -m MODEL -f TEXT [-o imatrix.gguf] [-c 512] [--chunks N] [--skip-tokens N]
// [-t T]`: an importance matrix as llama-imatrix computes it (quant/imatrix.h), written in
// its GGUF format, for `ridge quantize --imatrix` or llama-quantize --imatrix. Progress on
// stderr; the model is never overwritten and a failed run leaves no output file.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "model/model.h"
#include "quant/calibration.h"
#include "quant/imatrix.h"
#include "tokenizer/tokenizer.h"

namespace ridge::cli {
namespace {

struct ImatrixCliOptions {
  std::string model;
  std::string text_file;
  std::string output = "imatrix.gguf";
  int32_t n_ctx = 512;
  int32_t chunks = -1;
  int64_t skip_tokens = 0;
  int threads = 0;
};

void imatrix(const ImatrixCliOptions& opt) {
  const std::string model_path = resolve_model_path(opt.model);
  std::error_code ec;
  if (std::filesystem::exists(opt.output, ec) && std::filesystem::equivalent(model_path, opt.output, ec))
    throw Error(str_cat("imatrix: ", opt.output, " is the model file; refusing to overwrite it"));
  if (opt.n_ctx < 16) throw Error(str_cat("-c must be >= 16, got ", opt.n_ctx));
  if (opt.chunks == 0 || opt.chunks < -1) throw Error(str_cat("--chunks must be >= 1 (or -1: all), got ", opt.chunks));
  const std::string text = read_text_file(opt.text_file);
  auto model = Model::load(model_path, {.n_threads = opt.threads, .max_batch_tokens = opt.n_ctx});
  const Tokenizer tok = Tokenizer::from_gguf(model->file());
  const int32_t max_windows = opt.chunks > 0 ? opt.chunks : std::numeric_limits<int32_t>::max();
  const quant::CalibrationSet set = quant::calibration_windows(tok, text, opt.n_ctx, max_windows, opt.skip_tokens);
  std::fprintf(stderr, "imatrix: %s over %zu windows of %d tokens of %s (from token %lld)\n", model_path.c_str(),
               set.windows.size(), set.n_ctx, opt.text_file.c_str(), static_cast<long long>(opt.skip_tokens));
  quant::Imatrix m =
      quant::collect_imatrix(*model, set, [](const std::string& line) { std::fputs(line.c_str(), stderr); });
  m.datasets = {opt.text_file};
  quant::write_imatrix(m, opt.output);
  std::fprintf(stderr, "imatrix: %zu entries (%u chunks of %u tokens) -> %s\n", m.entries.size(), m.chunk_count,
               m.chunk_size, opt.output.c_str());
}

}  // namespace

void add_imatrix_command(CLI::App& app) {
  auto opt = std::make_shared<ImatrixCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "imatrix", "Compute an importance matrix for quantize --imatrix (as llama-imatrix, in its GGUF format)");
  cmd->add_option("-m,--model", opt->model, "GGUF model (a file, or a cached model name)")->required();
  cmd->add_option("-f,--file", opt->text_file, "Calibration text")->required();
  cmd->add_option("-o,--output", opt->output, "imatrix GGUF to write")->capture_default_str();
  cmd->add_option("-c,--ctx-size", opt->n_ctx, "Tokens per window")->capture_default_str();
  cmd->add_option("--chunks", opt->chunks, "Most windows to use (-1: all the text gives)")->capture_default_str();
  cmd->add_option("--skip-tokens", opt->skip_tokens,
                  "Start this many tokens into the text (keep evaluation text out)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", opt->threads, "Threads (0: all cores)")->capture_default_str();
  cmd->callback([opt] { imatrix(*opt); });
}

}  // namespace ridge::cli
