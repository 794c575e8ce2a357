#pragma once
#include "host/cli.hpp"

namespace mnistdp {

// `mnist-dp train`: finds and loads the data, picks the device, builds the replicas, trains, reports.
// Returns the process exit code.
int run_train(const TrainOptions& options);

}  // namespace mnistdp
