// ZeRO stage 1's step (strategy.hpp): the all-reduce cut in its two halves, with the optimiser between them.
//
//   each replica its shard's gradient of the step's rows          (compute_step_gradients, as the all-reduce)
//   reduce-scatter: replica r receives the sum over its shard     (Communicator::reduce_scatter_gradients)
//   replica r steps its shard of the parameters, its momentum     (Replica::sgd_step_shard)
//     kept for that shard alone: 1/N of the optimiser state each
//   all-gather: every shard of the parameters to every replica    (Communicator::all_gather_parameters)
//
// The sums are added in the all-reduce's order and SGD works element by element, so the parameters and the
// momentum are the all-reduce's to the bit (tests/test_zero1.cpp); what changes is what each replica holds.
#include <fmt/format.h>

#include <stdexcept>

#include "host/model/params.hpp"
#include "host/training/strategy.hpp"

namespace mnistdp {

float* Replica::parameter_buffer() {
  throw std::logic_error(fmt::format("{} does not take ZeRO-1's step (--strategy zero1)", description()));
}

void Replica::sgd_step_shard(const SgdConfig& /*cfg*/, std::size_t /*first*/, std::size_t /*count*/) {
  throw std::logic_error(fmt::format("{} does not take ZeRO-1's step (--strategy zero1)", description()));
}

std::vector<Shard> parameter_shards(int world_replicas) {
  std::vector<Shard> shards;
  for (int r = 0; r < world_replicas; ++r)
    shards.push_back(shard_of(static_cast<int>(ParamLayout::kCount), world_replicas, r));
  return shards;
}

namespace {

class Zero1Strategy final : public Strategy {
 public:
  explicit Zero1Strategy(std::unique_ptr<Communicator> communicator)
      : communicator_(std::move(communicator)) {
    if (!communicator_) throw std::invalid_argument("ZeRO-1: no communicator");
  }

  std::string description() const override { return communicator_->description(); }
  // After the all-gather every replica holds the whole of the run's parameters.
  bool every_replica_steps() const override { return true; }
  bool across_processes() const override { return false; }
  TraceStrategy trace_phases() const override { return TraceStrategy::zero1; }
  void await_completion() override { communicator_->await_completion(); }

  void trace_steps(long steps) override {
    trace_remaining_ = steps;
    trace_.clear();
  }
  std::vector<LinkStepMarks> take_link_trace() override {
    trace_remaining_ = 0;
    return std::move(trace_);
  }

  bool store_momentum(std::span<Replica* const> replicas, std::span<float> momentum) override {
    if (!replicas[0]->has_momentum()) return false;
    for (Replica* r : replicas)  // each writes its own shard's values
      r->store_momentum(momentum);
    return true;
  }

  void step(const ReplicaSet& set, const StepRows& rows, const SgdConfig& sgd) override {
    if (set.world_replicas != static_cast<int>(set.replicas.size()))
      throw std::logic_error("ZeRO-1 runs in one process");
    if (shards_.size() != set.replicas.size()) shards_ = parameter_shards(set.world_replicas);
    set.workers.run([&](int r) { compute_step_gradients(*set.replicas[r], rows, set.world_replicas, r); });
    // The trace's entries are micro-batches, as the replicas' timelines; the collectives are the last's, the
    // others' entries left at zero (write_chrome_trace draws these phases once a step).
    traced_ = trace_remaining_ > 0;
    if (traced_) {
      trace_.resize(trace_.size() + static_cast<std::size_t>(rows.micro_batches()));
      trace_remaining_ -= rows.micro_batches();
    }
    mark(LinkMark::reduce);
    communicator_->reduce_scatter_gradients(set.replicas, shards_);
    mark(LinkMark::reduce_end);
    set.workers.run([&](int r) {
      const Shard& s = shards_[static_cast<std::size_t>(r)];
      set.replicas[r]->sgd_step_shard(sgd, static_cast<std::size_t>(s.first),
                                      static_cast<std::size_t>(s.count));
    });
    mark(LinkMark::broadcast);
    communicator_->all_gather_parameters(set.replicas, shards_);
    mark(LinkMark::broadcast_end);
  }

 private:
  // Host clocks, on the trace clock every replica's marks use.
  void mark(LinkMark m) {
    if (traced_) trace_.back()[static_cast<std::size_t>(m)] = trace_clock_us();
  }

  std::unique_ptr<Communicator> communicator_;
  std::vector<Shard> shards_;
  long trace_remaining_ = 0;          // micro-batches
  bool traced_ = false;               // the step in progress
  std::vector<LinkStepMarks> trace_;  // [traced micro-batch]
};

}  // namespace

std::unique_ptr<Strategy> make_zero1_strategy(std::unique_ptr<Communicator> communicator) {
  return std::make_unique<Zero1Strategy>(std::move(communicator));
}

}  // namespace mnistdp
