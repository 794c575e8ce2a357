#pragma once
#include <memory>

#include "host/command/cli.hpp"
#include "host/processes/launch.hpp"
#include "host/processes/process_group.hpp"

namespace mnistdp {

// The process group of a multi-process launch (MPI under mpirun, TCP under torchrun and srun), joined with
// every other rank; null for a single process.
std::unique_ptr<ProcessGroup> join_process_group(const LaunchInfo& launch, const TrainOptions& options);

// `mnist-dp train`: finds and loads the data, picks the device, builds the replicas, trains, reports, saves.
// group: null for a single process. Only rank 0 prints the log and writes files. Returns the exit code.
int run_train(const TrainOptions& options, const LaunchInfo& launch, ProcessGroup* group);

// `mnist-dp eval`: the test loss and accuracy of a checkpoint. Returns the process exit code.
int run_eval(const EvalOptions& options);

}  // namespace mnistdp
