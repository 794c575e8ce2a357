#include "host/cuda/queued_steps.hpp"

#include <memory>

namespace mnistdp {

void QueuedStepLaunch::take_whole_step(const StepShape& shape, int first) {
  if (!queues(shape)) {
    GraphStepLaunch::take_whole_step(shape, first);
    return;
  }
  const bool continues = queued_ && same_shape(queued_->shape, shape) &&
                         queued_->first + queued_->count * shape.global_batch == first;
  if (!continues) launch_queued();
  if (!queued_) queued_ = QueuedSteps{shape, first, 0};
  if (++queued_->count == steps_per_graph_) launch_queued();
}

bool QueuedStepLaunch::queues(const StepShape& shape) const {
  return steps_per_graph_ > 1 && has_graph(shape);
}

void QueuedStepLaunch::launch_queued() {
  if (!queued_) return;
  StepShape shape = queued_->shape;
  shape.steps = queued_->count;
  const int first = queued_->first;
  queued_.reset();
  launch_steps(shape, first);
}

void QueuedStepLaunch::launch_steps(const StepShape& shape, int first) {
  if (shape.steps > 1) ++counts_.multi_step;
  // Steps are queued only once their shape's one-step graph exists: whatever is set up on first use is.
  run_graphed(
      shape, first, [&] { enqueue_whole_steps(shape); }, /*warmed_up=*/true);
}

std::unique_ptr<StepLaunch> make_queued_step_launch(CudaStep& step, const StepLaunchSettings& settings) {
  return std::make_unique<QueuedStepLaunch>(step, settings.steps_per_graph);
}

}  // namespace mnistdp
