#pragma once
// Where a run starts: from the seed, from a parameter file (--init-from), or where a checkpoint left off
// (--resume), which also brings back the momentum, the step and the settings the checkpoint stores.
#include <filesystem>
#include <optional>
#include <vector>

#include "host/checkpoint/checkpoint.hpp"

#include "host/command/cli.hpp"
#include "host/processes/process_group.hpp"
#include "host/training/trainer.hpp"
#include "mnist_io/dataset.hpp"

namespace mnistdp {

struct StartState {
  std::vector<float> params;
  std::optional<std::vector<float>> momentum;
  long step = 0;
};

// The activation a checkpoint at `path` was trained with: its metadata's, or relu for a file without the key
// (written before there was a choice, or by PyTorch's SimpleNet). Throws CheckpointError for a name this
// build does not know.
Activation checkpoint_activation(const Checkpoint& c, const std::filesystem::path& path);

// Reads --resume or --init-from (rank 0 alone), or initialises the parameters from the seed. A resumed run
// takes its settings into t from the file, and refuses one that the command line gives otherwise, naming
// both values.
StartState start_state(const TrainOptions& o, TrainConfig& t, const DataSplits& data);

// A multi-process run's start comes from rank 0, which alone reads --resume or --init-from (so the file need
// only be on rank 0's node, where rank 0 also saves): the step, the settings and the momentum are broadcast
// to the other ranks here; the parameters reach them through the trainer, which broadcasts rank 0's at its
// start.
StartState share_start_state(ProcessGroup& group, StartState state, TrainConfig& t);

}  // namespace mnistdp
