#pragma once
// Where the replicas live and how their gradients meet: the CPU (replicas on threads, summed in host memory),
// one replica per GPU (NCCL), or several replicas on one GPU (a reduction kernel). Decided from the command
// line before any data is read, so that an impossible request fails at once.
#include <memory>
#include <string>
#include <vector>

#include "host/cli.hpp"
#include "host/communicator.hpp"
#include "host/replica.hpp"
#include "mnist_io/dataset.hpp"

namespace mnistdp {

struct Placement {
  bool gpu = false;
  int replicas = 1;
  std::vector<int> replica_devices;       // for GPU placements: the device of each replica
  std::vector<std::string> device_lines;  // one line per device used, for the start-up report
};

Placement choose_placement(const TrainOptions& options);

std::vector<std::unique_ptr<Replica>> make_replicas(const TrainOptions& options, const DataSplits& data,
                                                    const Placement& placement);

std::unique_ptr<Communicator> make_communicator(const Placement& placement,
                                                const std::vector<std::unique_ptr<Replica>>& replicas);

}  // namespace mnistdp
