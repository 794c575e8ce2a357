#pragma once
// A step as a CUDA graph (CudaStepOptions::cuda_graphs): one launch from the host where the plain way makes
// ten or more. Why it lives in the replica rather than in the trainer, and how:
//
// - The trainer drives every backend through the same calls: compute_gradients, the communicator's
//   all_reduce_gradients and sgd_step for each step of several replicas, and step_alone for a lone
//   replica's (Replica::step_alone). The graph must not change that loop (the CPU path shares it), so the
//   replica decides by itself what to launch, and when.
// - Whole step (a lone replica). step_alone knows everything the step needs (rows, global batch, SGD
//   settings) and nothing stands between the gradients and the SGD step: the whole step, gather to SGD (or
//   the fused step's three kernels), is one graph. The few steps a lone replica takes in two calls (the
//   momentum buffer's first) the replica runs the plain way.
// - Several replicas. Each replica's all-reduce needs the others' at the same time, so it stays the
//   communicator's; compute_gradients replays a graph of the gradient launches alone, and sgd_step is its one
//   kernel, as in the plain path.
// - One graph for every batch of an epoch. A graph freezes its kernels' arguments, so the batch's row offset
//   cannot be one: the gather reads it from a device counter (cuda::gather_normalize_at), and the graph's
//   last node moves the counter on by the global batch. The host keeps the value the counter will hold and
//   sets it with one small kernel only when the next step starts elsewhere (a new epoch, a resumed run). A
//   graph is therefore keyed by the step's shape alone: rows, global batch and SGD settings. Training at
//   batch 64 needs two: the full batch and the epoch's short last one.
// - The first step of each shape launches the graph's own kernels one by one (the offset read from the
//   device counter too), so that whatever is set up lazily on first use (module loading, cuBLAS's
//   workspace) is in place before a capture, during which it would be refused; the second captures and
//   replays, and later ones replay. The first SGD step with momentum (which initialises the buffer) and
//   traced steps run the plain way (the replica sees to both).
// - The graph replays exactly the kernels of the plain path, with the same grids and arguments (the gather
//   reads the same offset, from the device instead of from its arguments); every kernel is deterministic, so
//   a replayed step gives the plain step's results to the bit (cuBLAS aside: it may choose its algorithm
//   differently while capturing).
//
// The ways that keep whole steps back (queued_steps.hpp, persistent_steps.cpp) build on this one through
// its hooks: take_whole_step, launch_queued and holds_steps.
#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

#include "host/cuda/step_launch.hpp"
#include "kernels/cuda/runtime/graph.hpp"

namespace mnistdp {

class GraphStepLaunch : public StepLaunch {
 public:
  // At most this many step graphs are kept; a new shape beyond that drops them all. A trainer with a fixed
  // batch needs two (the full batch, the short one), and with steps_per_graph up to about six (the one-step
  // graphs, N steps, and the one or two shorter runs that loss reads and the epoch's end cut).
  static constexpr std::size_t kMaxGraphs = 16;

  explicit GraphStepLaunch(CudaStep& step) : step_(step) {}

  void compute_gradients(int first, int count, int global_batch) override;
  void sgd_step(const SgdConfig& cfg, bool first_step) override;
  bool step_alone(int first, int count, const SgdConfig& cfg) override;
  void launch_queued() override {}
  bool holds_steps() const override { return false; }
  void drop_graphs() override { graphs_.clear(); }
  StepGraphCounts graph_counts() const override { return counts_; }

 protected:
  // What a step graph was captured for: a graph is replayed only for a step of the same shape.
  struct StepShape {
    int count = 0;
    int global_batch = 0;
    bool whole_step = false;  // gradients and SGD; otherwise the gradients alone
    SgdConfig sgd;            // whole steps only
    int steps = 1;            // whole steps only: consecutive steps in the graph
  };
  static bool same_shape(const StepShape& a, const StepShape& b);

  // A whole step of `shape` (one step) at row `first`: here, its graph run at once.
  virtual void take_whole_step(const StepShape& shape, int first);

  // Whether `shape` has a captured graph (its kernels have run once, outside any capture).
  bool has_graph(const StepShape& shape) const;
  // shape.steps whole steps (gradients and SGD, or the fused step), each reading its rows from the device
  // counter and moving it on.
  void enqueue_whole_steps(const StepShape& shape);
  // Runs one step (or its gradients, or shape.steps steps) of `shape` starting at row `first`, with `enqueue`
  // putting its launches on the stream (the row offset read from the device counter): launch by launch the
  // first time the shape is seen, then as the graph of `enqueue` (captured once), replayed. warmed_up: its
  // kernels have run before (queued steps, whose one-step graph exists), so the first sight is captured at
  // once.
  void run_graphed(const StepShape& shape, int first, const std::function<void()>& enqueue,
                   bool warmed_up = false);

  CudaStep& step_;
  StepGraphCounts counts_;

 private:
  struct StepGraph {
    StepShape shape;
    std::optional<CudaGraphExec> exec;  // none yet: the shape has run once, the plain way
  };

  int cursor_host_ = -1;  // the value the device counter holds once the stream has caught up; -1: unknown
  std::vector<StepGraph> graphs_;
};

}  // namespace mnistdp
