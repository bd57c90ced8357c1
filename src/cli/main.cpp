// Entry point of the `ridge` command: registers the subcommands and turns every error
// into one line on stderr and a non-zero exit status.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "cli/interrupt.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"ridge: run and serve GGUF language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ridge 0.1.0");
  ridge::cli::add_inspect_command(app);
  ridge::cli::add_tokenize_command(app);
  ridge::cli::add_run_command(app);
  ridge::cli::add_bench_command(app);
  ridge::cli::add_size_command(app);
  ridge::cli::add_roofline_command(app);
  ridge::cli::add_spec_sim_command(app);
  ridge::cli::add_serve_command(app);
  ridge::cli::add_perplexity_command(app);
  ridge::cli::add_quantize_command(app);
  ridge::cli::add_imatrix_command(app);
  ridge::cli::add_template_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const ridge::cli::Interrupted& e) {
    std::fprintf(stderr, "ridge: %s\n", e.what());
    return 130;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ridge: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
