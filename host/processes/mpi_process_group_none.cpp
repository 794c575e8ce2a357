// The build without MPI (none was found when it was configured): mpirun launches are refused with the reason.
#include <stdexcept>

#include "host/processes/mpi_process_group.hpp"

namespace mnistdp {

bool have_mpi() {
  return false;
}

std::unique_ptr<ProcessGroup> make_mpi_process_group() {
  throw std::runtime_error(
      "started by mpirun, but this build of mnist-dp has no MPI (Open MPI was not found when it was "
      "configured: install libopenmpi-dev and rebuild); torchrun or srun with MASTER_ADDR and MASTER_PORT "
      "work without it");
}

}  // namespace mnistdp
