#pragma once
// Who this process is in a multi-process run, read from what the launcher put in the environment:
//
//   mpirun (Open MPI)   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   torchrun            RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (MASTER_PORT + 1 when
//                       TORCHELASTIC_USE_AGENT_STORE=True: torchrun's own store is on MASTER_PORT then)
//   srun (Slurm)        SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, with MASTER_ADDR and MASTER_PORT set by
//   the
//                       job script (Slurm has no rendezvous address of its own)
//
// Under mpirun the ranks talk through MPI; under torchrun and srun, rank 0 listens on MASTER_ADDR:MASTER_PORT
// and the others connect to it (host/processes/tcp_process_group.hpp), admitted by the run token that
// MNISTDP_RUN_TOKEN holds, or the file MNISTDP_RUN_TOKEN_FILE names. Reading the environment is kept apart
// from acting on it, so that every refusal can be tested without starting a process.
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

namespace mnistdp {

// A launch that cannot work: a variable missing, malformed or out of range. The message names the variable.
class LaunchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Launcher {
  None,      // one process
  Mpi,       // mpirun: MPI carries the host-side collectives
  Torchrun,  // RANK/WORLD_SIZE/...: a TCP rendezvous at MASTER_ADDR:MASTER_PORT
  Slurm,     // SLURM_PROCID/...: the same TCP rendezvous
};

struct LaunchInfo {
  Launcher launcher = Launcher::None;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;       // the process's index on its node: it picks the GPU
  std::string master_addr;  // for the TCP rendezvous
  int master_port = 0;
  // The TCP rendezvous's secret, from MNISTDP_RUN_TOKEN or the file MNISTDP_RUN_TOKEN_FILE names; empty when
  // neither is set (tcp_process_group.hpp).
  std::string run_token;

  bool multi_process() const { return world_size > 1; }
};

// The value of an environment variable, or none. Tests pass a map; the program passes std::getenv.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// The process's environment.
EnvLookup process_environment();

// mode: "auto" (the first launcher whose variables are present, in the order of the table above), "none"
// (ignore the environment: one process), "mpi" or "env" (insist on that launcher's variables). A world of
// size 1 is a single process, whatever launched it.
LaunchInfo detect_launch(const std::string& mode, const EnvLookup& env);

// "mpirun", "torchrun", "srun" or "single process".
std::string launcher_name(Launcher launcher);

}  // namespace mnistdp
