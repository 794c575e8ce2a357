// The all-reduce's step (strategy.hpp): DistributedDataParallel's algorithm, one all-reduce of the whole flat
// gradient buffer a step.
#include <optional>
#include <stdexcept>

#include "host/training/shard.hpp"
#include "host/training/strategy.hpp"

namespace mnistdp {
namespace {

class AllReduceStrategy final : public Strategy {
 public:
  explicit AllReduceStrategy(std::unique_ptr<Communicator> communicator)
      : communicator_(std::move(communicator)) {
    if (!communicator_) throw std::invalid_argument("the all-reduce: no communicator");
  }

  std::string description() const override { return communicator_->description(); }
  bool every_replica_steps() const override { return true; }
  bool across_processes() const override { return true; }
  TraceStrategy trace_phases() const override { return TraceStrategy::allreduce; }
  void await_completion() override { communicator_->await_completion(); }

  void step(const ReplicaSet& set, const StepRows& rows, const SgdConfig& sgd) override {
    // Alone, a replica may fuse the update into its backward pass, as nothing is summed in between. Asked
    // once, at the first step.
    if (!whole_steps_) whole_steps_ = set.world_replicas == 1 && set.replicas[0]->takes_whole_steps();
    if (*whole_steps_ && rows.micro_batches() == 1 && set.replicas[0]->step_alone(rows.first, rows.rows, sgd))
      return;
    // scatter + parallel_apply: each replica works on its own rows of the global batch, on its own thread
    // (of each micro-batch in turn, when the step accumulates several).
    set.workers.run([&](int r) {
      compute_step_gradients(*set.replicas[r], rows, set.world_replicas, set.first_replica + r);
    });
    // The gradients of the global batch, in every replica.
    communicator_->all_reduce_gradients(set.replicas);
    // The same update from the same gradient keeps the replicas identical, without broadcasting parameters.
    set.workers.run([&](int r) { set.replicas[r]->sgd_step(sgd); });
  }

 private:
  std::unique_ptr<Communicator> communicator_;
  std::optional<bool> whole_steps_;
};

}  // namespace

void compute_step_gradients(Replica& replica, const StepRows& rows, int world_replicas, int world_index) {
  const int micro_batches = rows.micro_batches();
  for (int m = 0; m < micro_batches; ++m) {
    const Shard shard = shard_of(rows.micro_count(m), world_replicas, world_index);
    if (m > 0) {
      // The micro-batch before has no SGD step of its own.
      replica.no_sgd_step();
      replica.keep_gradients();
    }
    replica.compute_gradients(rows.micro_first(m) + shard.first, shard.count, rows.rows);
    if (m > 0) replica.add_kept_gradients();
  }
}

std::unique_ptr<Strategy> make_all_reduce_strategy(std::unique_ptr<Communicator> communicator) {
  return std::make_unique<AllReduceStrategy>(std::move(communicator));
}

}  // namespace mnistdp
