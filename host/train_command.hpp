#pragma once
#include "host/cli.hpp"

namespace mnistdp {

// `mnist-dp train`: finds and loads the data, picks the device, builds the replicas, trains, reports, saves.
// Returns the process exit code.
int run_train(const TrainOptions& options);

// `mnist-dp eval`: the test loss and accuracy of a checkpoint. Returns the process exit code.
int run_eval(const EvalOptions& options);

}  // namespace mnistdp
