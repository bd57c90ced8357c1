// Starting a tensor-parallel job over MPI (`mpirun -np N ridge ... --tp N`): the
// Communicator every rank's model uses. MPI is an optional build feature (CMake finds it
// or not); without it, start_mpi is a clear error and --tp 1 still works.
//
//   std::unique_ptr<Communicator> comm = dist::start_mpi(tp);  // null when tp == 1
//   auto model = Model::load(path, {.comm = comm.get()});
#pragma once

#include <memory>

#include "core/communicator.h"

namespace ridge::dist {

// Whether this build links MPI.
bool mpi_available();

// Null for tp == 1 (no MPI needed). Otherwise initializes MPI (thread level SERIALIZED:
// a server's engine thread makes the calls), checks that the job has exactly tp ranks,
// and returns the group; MPI is finalized when it is destroyed. Throws ridge::Error when
// the build has no MPI, tp < 1, or mpirun started a different number of ranks.
// A collective that waits more than RIDGE_TP_TIMEOUT seconds (default 60) for a peer
// prints an error naming the rank and ends the job (MPI_Abort): a dead rank never hangs
// the others.
std::unique_ptr<Communicator> start_mpi(int tp);

}  // namespace ridge::dist
