// A persistent kernel (CudaStepOptions::persistent), for a lone replica's whole steps (step_alone). Whole
// steps of a shape the fused step takes are queued from the first (no graph is needed, nor a run to warm
// one up), and the queue is launched as one cooperative kernel that runs all its steps, the rows' position
// an argument instead of the device counter's. Other shapes run as queued_steps.hpp runs them. The replica
// refuses the kernel, when it is made, where the device cannot launch it.
#include <memory>

#include "host/cuda/queued_steps.hpp"
#include "host/model/params.hpp"
#include "kernels/cuda/fused/persistent_step.hpp"

namespace mnistdp {
namespace {

class PersistentStepLaunch final : public QueuedStepLaunch {
 public:
  PersistentStepLaunch(CudaStep& step, int steps_per_graph) : QueuedStepLaunch(step, steps_per_graph) {}

 protected:
  bool queues(const StepShape& shape) const override {
    return runs_persistent(shape) || QueuedStepLaunch::queues(shape);
  }
  void launch_steps(const StepShape& shape, int first) override {
    if (!runs_persistent(shape)) {
      QueuedStepLaunch::launch_steps(shape, first);
      return;
    }
    // The rows' position is an argument: the device counter is neither read nor moved, and the value the
    // graphs expect it to hold stays true.
    step_.persistent_steps(shape.count, shape.global_batch, shape.sgd, first, shape.steps);
  }

 private:
  // The replica refuses the persistent kernel without the fused step.
  static bool runs_persistent(const StepShape& shape) {
    return shape.whole_step && cuda::persistent_step_fits(shape.count, ParamLayout::kClasses);
  }
};

}  // namespace

std::unique_ptr<StepLaunch> make_persistent_step_launch(CudaStep& step, const StepLaunchSettings& settings) {
  return std::make_unique<PersistentStepLaunch>(step, settings.steps_per_graph);
}

}  // namespace mnistdp
