// The `ridge` subcommands. Each registers its CLI11 options and a callback that does the
// work; main() only dispatches. Commands are thin over the rooms (gguf, tokenizer, ...).
#pragma once

#include <string>

#include "model/model_path.h"  // resolve_model_path, which every command uses

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

// A whole file as bytes (prompts, calibration text, templates). Throws ridge::Error
// naming the path: "PATH: cannot open (No such file or directory)", "PATH: is a directory".
std::string read_text_file(const std::string& path);

}  // namespace ridge::cli
