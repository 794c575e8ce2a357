#pragma once
// A process group over MPI, for runs started by mpirun. MPI is initialised here and finalised when the
// group is destroyed, so there may be one in a process at a time (MPI allows one initialisation per
// process). Only the thread that made the group may use it (MPI_THREAD_FUNNELED): the trainer calls
// collectives from its own thread, never from the replica threads.
//
// MPI has no timeout of its own: a rank that hangs without failing holds the others. A rank that fails calls
// abort(), which is MPI_Abort: mpirun ends every process of the job, and exits non-zero.
#include <memory>

#include "host/processes/process_group.hpp"

namespace mnistdp {

// Whether this build has MPI (found at configure time).
bool have_mpi();

// Throws std::runtime_error when this build has no MPI, or MPI fails to start.
std::unique_ptr<ProcessGroup> make_mpi_process_group();

}  // namespace mnistdp
