// The plain way: every launch of a step as the trainer calls for it, nothing kept back. What every other
// way must match to the bit.
#include <memory>

#include "host/cuda/step_launch.hpp"

namespace mnistdp {
namespace {

class PlainStepLaunch final : public StepLaunch {
 public:
  explicit PlainStepLaunch(CudaStep& step) : step_(step) {}

  void compute_gradients(int first, int count, int global_batch) override {
    if (count == 0)
      step_.zero_gradients();
    else
      step_.gradients(first, count, global_batch, /*from_cursor=*/false);
  }
  void sgd_step(const SgdConfig& cfg, bool first_step) override { step_.sgd(cfg, first_step); }
  // The same launches as the two calls: nothing to gain.
  bool step_alone(int /*first*/, int /*count*/, const SgdConfig& /*cfg*/) override { return false; }

  void launch_queued() override {}
  bool holds_steps() const override { return false; }
  void drop_graphs() override {}
  StepGraphCounts graph_counts() const override { return {}; }

 private:
  CudaStep& step_;
};

}  // namespace

std::unique_ptr<StepLaunch> make_plain_step_launch(CudaStep& step, const StepLaunchSettings& /*settings*/) {
  return std::make_unique<PlainStepLaunch>(step);
}

}  // namespace mnistdp
