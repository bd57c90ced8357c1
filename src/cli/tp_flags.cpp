#include "cli/tp_flags.h"

#include <CLI/CLI.hpp>

namespace ridge::cli {

void add_tp_flag(CLI::App& cmd, int& tp) {
  cmd.add_option("--tp", tp,
                 "Tensor-parallel ranks: split every layer over N MPI processes "
                 "(mpirun -np N ridge ... --tp N; docs/distributed.md)")
      ->capture_default_str();
}

std::unique_ptr<Model> load_model_on_rank(const std::string& path, ModelOptions options, Communicator* comm) {
  options.comm = comm;
  std::unique_ptr<Model> model = Model::load(path, options);
  if (!model->is_tp_worker()) return model;
  model->run_tp_worker();
  return nullptr;
}

}  // namespace ridge::cli
