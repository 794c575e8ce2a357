#pragma once
// The replicas a placement asks for (host/command/placement.hpp), made from the command line's step options,
// and the communicator that sums their gradients: the host sum, the process group's, NCCL, or the same-device
// reduction.
#include <chrono>
#include <memory>
#include <vector>

#include "host/command/cli.hpp"
#include "host/command/placement.hpp"
#include "host/processes/process_group.hpp"
#include "host/training/communicator.hpp"
#include "host/training/data_parallel.hpp"
#include "host/training/replica.hpp"
#include "mnist_io/dataset.hpp"

namespace mnistdp {

// processes: how many processes train together (each with placement's replicas); a lone replica (one in
// all) takes its steps whole (Replica::step_alone). activation: the hidden layer's, which a resumed run or an
// evaluated checkpoint takes from its file.
std::vector<std::unique_ptr<Replica>> make_replicas(const TrainOptions& options, Activation activation,
                                                    const DataSplits& data, const Placement& placement,
                                                    int processes = 1);

// The communicator the placement's layout takes (communicator_table.hpp). group: null for a single process.
// timeout: how long a multi-process NCCL communicator waits for its peers.
std::unique_ptr<Communicator> make_communicator(const Placement& placement,
                                                const std::vector<std::unique_ptr<Replica>>& replicas,
                                                ProcessGroup* group, std::chrono::milliseconds timeout);

// nn.DataParallel's copies between the replicas (--strategy dataparallel): host memory's, or the CUDA
// devices'.
std::unique_ptr<DataParallelLinks> make_data_parallel_links(
    const Placement& placement, const std::vector<std::unique_ptr<Replica>>& replicas);

}  // namespace mnistdp
