#pragma once
// A step as a CUDA graph (CudaStepOptions::cuda_graphs): one launch from the host where the plain way makes
// ten or more. Why it lives in the replica rather than in the trainer, and how:
//
// - The trainer drives every backend through three calls per step: compute_gradients, the communicator's
//   all_reduce_gradients, sgd_step. The graph must not change that loop (the CPU path shares it), so the
//   replica decides by itself what to launch, and when.
// - Whole step (one replica, NCCL world size 1). The communicator hands this replica its all-reduce
//   (adopt_all_reduce) and from then on does nothing for it in all_reduce_gradients. compute_gradients
//   launches nothing: it records the step, and sgd_step, the first call that knows everything the step needs
//   (rows, global batch, SGD settings), launches the whole step, gather to SGD with the all-reduce between,
//   as one graph. Anything that must see the gradients before sgd_step (gradient_buffer, loss_sum, another
//   compute_gradients, new parameters or a new order) first launches the recorded work the plain way.
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
//   device counter too), so that whatever is set up lazily on first use (module loading, NCCL's
//   connections, cuBLAS's workspace) is in place before a capture, during which it would be refused; the
//   second captures and replays, and later ones replay. The first SGD step with momentum (which initialises
//   the buffer) and traced steps always run the plain way.
// - The graph replays exactly the kernels of the plain path, with the same grids and arguments (the gather
//   reads the same offset, from the device instead of from its arguments); every kernel is deterministic, so
//   a replayed step gives the plain step's results to the bit (cuBLAS aside: it may choose its algorithm
//   differently while capturing).
//
// The ways that keep whole steps back (queued_steps.hpp, persistent_steps.cpp) build on this one through
// its hooks: take_whole_step, launch_queued, holds_steps, forget_queue and refuse_adoption.
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

  explicit GraphStepLaunch(StepOps& ops) : ops_(ops) {}

  void compute_gradients(int first, int count, int global_batch) override;
  void sgd_step(const SgdConfig& cfg, bool first_step) override;
  void launch_queued() override {}
  void flush() override;
  bool holds_steps() const override { return pending_.has_value(); }
  void drop_graphs() override { graphs_.clear(); }
  void adopt_all_reduce(AllReduceFn all_reduce) override;
  void release_all_reduce() noexcept override;
  bool owns_all_reduce() const override { return static_cast<bool>(all_reduce_); }
  StepGraphCounts graph_counts() const override { return counts_; }

 protected:
  // What a step graph was captured for: a graph is replayed only for a step of the same shape.
  struct StepShape {
    int count = 0;
    int global_batch = 0;
    bool whole_step = false;  // gradients, all-reduce and SGD; otherwise the gradients alone
    SgdConfig sgd;            // whole steps only
    int steps = 1;            // whole steps only: consecutive steps in the graph
  };
  static bool same_shape(const StepShape& a, const StepShape& b);

  // A whole step of `shape` (one step) at row `first`, once sgd_step knows all of it: here, its graph run at
  // once.
  virtual void take_whole_step(const StepShape& shape, int first);
  // Steps kept back are dropped unlaunched (the all-reduce they need is going).
  virtual void forget_queue() {}
  // Throws where the replica cannot take its all-reduce with this way of launching.
  virtual void refuse_adoption() const {}

  // Whether `shape` has a captured graph (its kernels have run once, outside any capture).
  bool has_graph(const StepShape& shape) const;
  // shape.steps whole steps (gradients, all-reduce, SGD; or the fused step), each reading its rows from the
  // device counter and moving it on.
  void enqueue_whole_steps(const StepShape& shape);
  // Runs one step (or its gradients, or shape.steps steps) of `shape` starting at row `first`, with `enqueue`
  // putting its launches on the stream (the row offset read from the device counter): launch by launch the
  // first time the shape is seen, then as the graph of `enqueue` (captured once), replayed. warmed_up: its
  // kernels have run before (queued steps, whose one-step graph exists), so the first sight is captured at
  // once.
  void run_graphed(const StepShape& shape, int first, const std::function<void()>& enqueue,
                   bool warmed_up = false);

  StepOps& ops_;
  StepGraphCounts counts_;

 private:
  struct StepGraph {
    StepShape shape;
    std::optional<CudaGraphExec> exec;  // none yet: the shape has run once, the plain way
  };
  // A step recorded by compute_gradients, to be launched whole by sgd_step.
  struct PendingStep {
    int first = 0;
    int count = 0;
    int global_batch = 0;
  };

  // Launches a recorded step's gradients the plain way; its all-reduce, if adopted, is then owed to sgd_step.
  void flush_pending();

  int cursor_host_ = -1;  // the value the device counter holds once the stream has caught up; -1: unknown
  std::vector<StepGraph> graphs_;
  std::optional<PendingStep> pending_;
  bool all_reduce_owed_ = false;  // gradients launched, the adopted all-reduce not yet
  AllReduceFn all_reduce_;
};

}  // namespace mnistdp
