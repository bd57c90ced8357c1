// start_mpi for builds without MPI (CMake did not find it): --tp above 1 is an error.
#include "core/error.h"
#include "dist/mpi.h"

namespace ridge::dist {

bool mpi_available() { return false; }

std::unique_ptr<Communicator> start_mpi(int tp) {
  if (tp < 1) throw Error(str_cat("--tp must be at least 1, got ", tp));
  if (tp == 1) return nullptr;
  throw Error(str_cat("--tp ", tp, ": this ridge was built without MPI; install Open MPI (apt-get install "
                      "openmpi-bin libopenmpi-dev, or scripts/install-deps) and rebuild"));
}

}  // namespace ridge::dist
