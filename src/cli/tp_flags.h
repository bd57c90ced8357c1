// --tp N, which ridge run, serve, bench and perplexity share: tensor parallelism over MPI
// (`mpirun -np N ridge run --tp N ...`; model/tensor_parallel.h, dist/mpi.h). Every rank
// runs the same command line; rank 0 does the command's work and the others only serve
// its forward steps.
//
//   std::unique_ptr<Communicator> comm = dist::start_mpi(opt.tp);   // before the model
//   auto model = load_model_on_rank(path, {.n_threads = 2}, comm.get());
//   if (!model) return;   // a rank other than 0: rank 0's command has ended
#pragma once

#include <memory>
#include <string>

#include "core/communicator.h"
#include "model/model.h"

namespace CLI {
class App;
}

namespace ridge::cli {

void add_tp_flag(CLI::App& cmd, int& tp);

// Loads this rank's shard (the whole model without a group). Rank 0 gets the model; any
// other rank runs the steps rank 0 sends until rank 0's model is destroyed, then gets
// null: the command has nothing more to do there.
std::unique_ptr<Model> load_model_on_rank(const std::string& path, ModelOptions options, Communicator* comm);

}  // namespace ridge::cli
