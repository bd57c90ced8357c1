// The `ridge` subcommands. Each registers its CLI11 options and a callback that does the
// work; main() only dispatches. Commands are thin over the rooms (gguf, tokenizer, ...).
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace ridge::cli {

void add_inspect_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_size_command(CLI::App& app);
void add_roofline_command(CLI::App& app);
void add_spec_sim_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_perplexity_command(CLI::App& app);
void add_quantize_command(CLI::App& app);
void add_imatrix_command(CLI::App& app);
void add_template_command(CLI::App& app);

// Turns a model argument into a file path: an existing path is used as is; otherwise the
// name is looked up in the model cache (RIDGE_MODEL_CACHE or ~/.cache/ridge/models).
// Throws ridge::Error listing the cached models and how to fetch one.
std::string resolve_model_path(const std::string& model);

// A whole file as bytes (calibration text). Throws ridge::Error "PATH: cannot open".
std::string read_text_file(const std::string& path);

}  // namespace ridge::cli
