#pragma once
// Where the replicas live and how their gradients will meet: the CPU (replicas on threads, summed in host
// memory), one replica per GPU (NCCL), or several replicas on one GPU (a reduction kernel). Decided from the
// command line before any data is read, so that an impossible request fails at once; replica_setup.hpp then
// makes the replicas and their communicator.
#include <string>
#include <string_view>
#include <vector>

#include "host/command/cli.hpp"
#include "host/processes/launch.hpp"

namespace mnistdp {

struct Placement {
  bool gpu = false;
  int replicas = 1;
  std::vector<int> replica_devices;       // for GPU placements: the device of each replica
  std::vector<std::string> device_lines;  // one line per device used, for the start-up report
};

// In a multi-process launch each process takes one GPU, the one its local rank names (or the local rank's
// entry of --devices), and makes it current before any other CUDA call, so that no process opens a context on
// another's GPU. Messages are printed by rank 0 only. activity: what the CPU fallback's message says will
// run there ("training", "evaluating").
Placement choose_placement(const TrainOptions& options, const LaunchInfo& launch,
                           std::string_view activity = "training");

}  // namespace mnistdp
