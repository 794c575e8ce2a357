#pragma once
// The data-parallel strategies a run can take (--strategy), one row each, as the communicators are in
// communicator_table.hpp: the command line's choices, help and refusals, the start-up line, --explain's
// words, the trace's phases and the docs' table all come from here. A new strategy is its file in
// host/training/ (a Strategy, host/training/strategy.hpp), a row here and its maker in strategy_table.cpp.
#include <array>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "host/command/placement.hpp"
#include "host/processes/process_group.hpp"
#include "host/training/replica.hpp"
#include "host/training/strategy.hpp"
#include "host/training/trainer.hpp"

namespace mnistdp {

// What a strategy is made from: the run's replicas where the placement put them, and its process group
// (null for one process) with how long a communicator across processes waits for its peers.
struct StrategyParts {
  const Placement& placement;
  const std::vector<std::unique_ptr<Replica>>& replicas;
  ProcessGroup* group = nullptr;
  std::chrono::milliseconds timeout{0};
};

// --explain's telling of the run's first step: how: the strategy's description (Strategy::description).
using ExplainStep = void(std::FILE* out, const TrainConfig& config, int train_count,
                         const std::vector<std::string>& replica_names, const std::string& how);

struct StrategyEntry {
  const char* name;     // --strategy's word
  const char* torch;    // what PyTorch calls it
  const char* summary;  // what a step does, for --help and the docs
  const char* source;   // the file that implements it
  // What it takes: several processes (a process group), the CUDA fast paths (graphs, fused kernels, a lone
  // replica's whole steps), and whether every replica holds the run's parameters after a step
  // (--check-replicas). Each agrees with what its Strategy says of itself (tests/test_strategy_table.cpp).
  bool across_processes;
  bool fast_paths;
  bool every_replica_steps;
  // Whether it runs on CUDA replicas of several GPUs (it has their collectives), or of one GPU alone.
  bool across_gpus;
  const char* start_line;  // the start-up line, "{}" the strategy's description
  ExplainStep* explain;
  std::unique_ptr<Strategy> (*make)(const StrategyParts& parts);
};

extern const std::array<StrategyEntry, 3> kStrategies;

// Whether every replica of a GPU placement is on one device (vacuously, for a CPU placement).
bool all_on_one_device(const Placement& placement);

// The row called `name`; throws std::invalid_argument for a name that is none.
const StrategyEntry& strategy_entry(std::string_view name);
// The rows' names, the default first.
std::vector<std::string> strategy_names();
// --strategy's help: each row's name and summary.
std::string strategy_help();

}  // namespace mnistdp
