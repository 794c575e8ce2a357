// A persistent kernel (CudaStepOptions::persistent), for a replica that owns its all-reduce. Whole steps of
// a shape the fused step takes are queued from the first (no graph is needed, nor a run to warm one up), and
// the queue is launched as one cooperative kernel that runs all its steps, the rows' position an argument
// instead of the device counter's. Other shapes run as queued_steps.hpp runs them.
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "host/cuda/queued_steps.hpp"
#include "host/model/params.hpp"
#include "kernels/cuda/fused/persistent_step.hpp"

namespace mnistdp {
namespace {

class PersistentStepLaunch final : public QueuedStepLaunch {
 public:
  PersistentStepLaunch(StepOps& ops, int steps_per_graph, std::string cant_launch)
      : QueuedStepLaunch(ops, steps_per_graph), cant_launch_(std::move(cant_launch)) {}

 protected:
  // A lone replica: from here on its whole steps run in the persistent kernel, which must be able to.
  void refuse_adoption() const override {
    if (!cant_launch_.empty()) throw std::invalid_argument(cant_launch_);
  }
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
    ops_.enqueue_persistent_steps(shape.count, shape.global_batch, shape.sgd, first, shape.steps);
  }

 private:
  // The replica refuses the persistent kernel without the fused step.
  static bool runs_persistent(const StepShape& shape) {
    return shape.whole_step && cuda::persistent_step_fits(shape.count, ParamLayout::kClasses);
  }

  std::string cant_launch_;
};

}  // namespace

std::unique_ptr<StepLaunch> make_persistent_step_launch(StepOps& ops, int steps_per_graph,
                                                        std::string cant_launch) {
  return std::make_unique<PersistentStepLaunch>(ops, steps_per_graph, std::move(cant_launch));
}

}  // namespace mnistdp
