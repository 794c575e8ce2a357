#pragma once
// Several steps a graph (CudaStepOptions::steps_per_graph > 1), for a lone replica's whole steps
// (step_alone). Once a shape's one-step graph exists, sgd_step launches nothing: it queues the step, and
// every steps_per_graph consecutive steps of one shape are launched as one graph of them all (captured the
// second time that many are queued, as a one-step graph is). The queue is launched as it stands (as one graph
// of that many steps) by anything that must come after it: a step of another shape or not contiguous with it,
// and every call that reads or writes what the steps change (the gradients, the loss, the parameters, the
// momentum, the order, evaluation).
#include <optional>

#include "host/cuda/graph_step.hpp"

namespace mnistdp {

class QueuedStepLaunch : public GraphStepLaunch {
 public:
  QueuedStepLaunch(CudaStep& step, int steps_per_graph)
      : GraphStepLaunch(step), steps_per_graph_(steps_per_graph) {}

  void launch_queued() override;
  bool holds_steps() const override { return GraphStepLaunch::holds_steps() || queued_.has_value(); }

 protected:
  void take_whole_step(const StepShape& shape, int first) override;
  // Whether whole steps of `shape` are queued: once its one-step graph exists.
  virtual bool queues(const StepShape& shape) const;
  // Runs `shape.steps` queued steps of `shape`, the first at row `first`: as one graph.
  virtual void launch_steps(const StepShape& shape, int first);

  const int steps_per_graph_;

 private:
  // `count` consecutive whole steps of `shape` (whose steps is 1), the first at row `first`.
  struct QueuedSteps {
    StepShape shape;
    int first = 0;
    int count = 0;
  };
  std::optional<QueuedSteps> queued_;
};

}  // namespace mnistdp
