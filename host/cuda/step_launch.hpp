#pragma once
// How a CudaReplica's training steps reach its stream. The step's launches are written once, in CudaStep
// (cuda_step.hpp); a StepLaunch decides, for the steps the trainer gives the replica, when to make them: one
// by one, as CUDA graphs, queued into graphs of several steps, or as a persistent kernel. The replica picks
// one way when it is made, from its CudaStepOptions (step_launch_way()), and never changes it; each way is a
// file of its own, named in the table below.
//
// Every way launches the same kernels with the same arguments in the same order on the stream, so every
// way gives the plain way's results to the bit (cuBLAS aside, which may choose its algorithm differently
// while capturing).
#include <array>
#include <memory>

#include "host/cuda/cuda_step.hpp"
#include "kernels/ref/sgd.hpp"

namespace mnistdp {

// How the steps ran: captured graphs, graph replays, and steps launched the plain way while graphs were on
// (each counted once a launch, however many steps it ran); of these, the launches of several queued
// steps.
struct StepGraphCounts {
  long captured = 0;
  long replayed = 0;
  long plain = 0;
  long multi_step = 0;
};

// One way of launching a replica's steps. The replica calls these with its arguments checked, its device
// current and its activations large enough for the step. Traced steps (which carry timeline marks) and a
// lone replica's steps in two calls it launches itself, the plain way, after launch_queued().
class StepLaunch {
 public:
  virtual ~StepLaunch() = default;

  // Replica::compute_gradients and Replica::sgd_step; first_step: the first SGD step with momentum.
  virtual void compute_gradients(int first, int count, int global_batch) = 0;
  virtual void sgd_step(const SgdConfig& cfg, bool first_step) = 0;
  // Replica::step_alone, for a replica that is the only one in the run (no all-reduce between its
  // gradients and its SGD step), never its first step with momentum: the whole step. False, having
  // launched nothing, where this way has nothing to gain from it (the replica then takes the two calls).
  virtual bool step_alone(int first, int count, const SgdConfig& cfg) = 0;

  // Puts on the stream every step kept back: before anything reads or writes what the steps change
  // (parameters, momentum, gradients, the loss, the order, evaluation) or frees what they use.
  virtual void launch_queued() = 0;
  // Whether anything is kept back (launch_queued would launch something).
  virtual bool holds_steps() const = 0;
  // The activations have moved (once the stream is done with the old ones): graphs that hold their
  // addresses go.
  virtual void drop_graphs() = 0;

  virtual StepGraphCounts graph_counts() const = 0;
};

// The ways, as CudaStepOptions choose them.
enum class StepLaunchWay { plain, graph_per_step, multi_step_graph, persistent };

// What a way needs beside the step.
struct StepLaunchSettings {
  int steps_per_graph = 1;  // the most whole steps one launch runs (the queued ways)
};

struct StepLaunchEntry {
  StepLaunchWay way;
  const char* name;         // as tests and the documentation call it
  const char* source;       // the file that implements it, under host/cuda/
  const char* description;  // what it launches, and when
  const char* options;      // the command-line options that choose it
  std::unique_ptr<StepLaunch> (*make)(CudaStep& step, const StepLaunchSettings& settings);
};

std::unique_ptr<StepLaunch> make_plain_step_launch(CudaStep& step, const StepLaunchSettings& settings);
std::unique_ptr<StepLaunch> make_graph_step_launch(CudaStep& step, const StepLaunchSettings& settings);
std::unique_ptr<StepLaunch> make_queued_step_launch(CudaStep& step, const StepLaunchSettings& settings);
std::unique_ptr<StepLaunch> make_persistent_step_launch(CudaStep& step, const StepLaunchSettings& settings);

// Every way, in StepLaunchWay's order: a new way is one row here, its file and its enum value.
inline constexpr std::array kStepLaunchWays{
    StepLaunchEntry{StepLaunchWay::plain, "plain", "plain_step.cpp",
                    "every launch as the trainer calls for it, nothing kept back", "(none)",
                    &make_plain_step_launch},
    StepLaunchEntry{StepLaunchWay::graph_per_step, "a graph a step", "graph_step.cpp",
                    "each step captured once per shape and replayed: a lone replica's whole step, or the "
                    "gradients where an all-reduce stands between them and the SGD step",
                    "--cuda-graphs, --fused-head with it, --fused-step, --pdl", &make_graph_step_launch},
    StepLaunchEntry{StepLaunchWay::multi_step_graph, "several steps a graph", "queued_steps.cpp",
                    "a lone replica's whole steps queued and replayed as one graph of several",
                    "--steps-per-graph N (N > 1)", &make_queued_step_launch},
    StepLaunchEntry{StepLaunchWay::persistent, "persistent kernel", "persistent_steps.cpp",
                    "a lone replica's queued fused steps run by one cooperative kernel; other shapes as "
                    "several steps a graph",
                    "--persistent", &make_persistent_step_launch},
};

static_assert(
    [] {
      for (std::size_t i = 0; i < kStepLaunchWays.size(); ++i)
        if (static_cast<std::size_t>(kStepLaunchWays[i].way) != i) return false;
      return true;
    }(),
    "kStepLaunchWays: one row per StepLaunchWay, in its order");

inline const StepLaunchEntry& step_launch_entry(StepLaunchWay way) {
  return kStepLaunchWays[static_cast<std::size_t>(way)];
}

}  // namespace mnistdp
