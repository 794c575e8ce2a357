// The plain way: every launch of a step as the trainer calls for it, nothing kept back. What every other
// way must match to the bit.
#include <memory>
#include <stdexcept>

#include "host/cuda/step_launch.hpp"

namespace mnistdp {
namespace {

class PlainStepLaunch final : public StepLaunch {
 public:
  explicit PlainStepLaunch(StepOps& ops) : ops_(ops) {}

  void compute_gradients(int first, int count, int global_batch) override {
    if (count == 0) {
      ops_.zero_gradients();
      return;
    }
    ops_.ensure_rows(count);
    ops_.enqueue_gradients(first, count, global_batch, /*from_cursor=*/false);
  }

  void sgd_step(const SgdConfig& cfg, bool first_step) override { ops_.enqueue_sgd(cfg, first_step); }

  void launch_queued() override {}
  void flush() override {}
  bool holds_steps() const override { return false; }
  void drop_graphs() override {}

  // The all-reduce is adopted only to be put inside a step graph.
  void adopt_all_reduce(AllReduceFn /*all_reduce*/) override {
    throw std::logic_error("adopt_all_reduce: this replica does not use CUDA graphs");
  }
  void release_all_reduce() noexcept override {}
  bool owns_all_reduce() const override { return false; }

  StepGraphCounts graph_counts() const override { return {}; }

 private:
  StepOps& ops_;
};

}  // namespace

std::unique_ptr<StepLaunch> make_plain_step_launch(StepOps& ops) {
  return std::make_unique<PlainStepLaunch>(ops);
}

}  // namespace mnistdp
