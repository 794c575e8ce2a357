#include "host/training/data_parallel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "host/model/params.hpp"
#include "host/training/communicator.hpp"
#include "host/training/strategy.hpp"

namespace mnistdp {

namespace {

constexpr int kClasses = ParamLayout::kClasses;

[[noreturn]] void no_data_parallel(const Replica& replica) {
  throw std::logic_error(fmt::format("{} does not take nn.DataParallel's step (--strategy dataparallel)",
                                     replica.description()));
}

class HostDataParallelLinks final : public DataParallelLinks {
 public:
  explicit HostDataParallelLinks(std::span<Replica* const> replicas)
      : replicas_(replicas.begin(), replicas.end()) {
    if (replicas_.empty()) throw std::invalid_argument("DataParallel links: no replicas");
    for (std::size_t r = 0; r < replicas_.size(); ++r) {
      if (replicas_[r]->device_place()) {
        throw std::invalid_argument(
            fmt::format("DataParallel links over host memory: replica {} ({}) is on a "
                        "device",
                        r, replicas_[r]->description()));
      }
    }
  }

  std::string description() const override {
    return fmt::format("nn.DataParallel's copies in host memory over {} replica{}", replicas_.size(),
                       replicas_.size() == 1 ? "" : "s");
  }

  void trace_steps(long steps) override {
    trace_remaining_ = steps;
    trace_.clear();
  }
  std::vector<LinkStepMarks> take_trace() override {
    trace_remaining_ = 0;
    return std::move(trace_);
  }

  void broadcast_parameters() override {
    if (trace_remaining_ > 0) trace_.emplace_back();
    mark(LinkMark::broadcast);
    const float* master = replicas_[0]->shard_buffers(0).params;
    for (std::size_t r = 1; r < replicas_.size(); ++r)
      std::copy(master, master + ParamLayout::kCount, replicas_[r]->shard_buffers(0).params);
    mark(LinkMark::broadcast_end);
  }

  void gather_and_take_loss(std::span<const Shard> shards, int rows, int global_batch) override {
    mark(LinkMark::gather);
    const auto n = static_cast<std::size_t>(rows);
    logits_.resize(n * kClasses);
    labels_.resize(n);
    dlogits_.resize(n * kClasses);
    for (std::size_t r = 0; r < replicas_.size(); ++r) {
      const Shard& s = shards[r];
      if (s.count == 0) continue;
      const Replica::ShardBuffers b = replicas_[r]->shard_buffers(s.count);
      std::copy_n(b.logits, static_cast<std::size_t>(s.count) * kClasses,
                  logits_.begin() + static_cast<std::ptrdiff_t>(s.first) * kClasses);
      std::copy_n(b.labels, static_cast<std::size_t>(s.count), labels_.begin() + s.first);
    }
    mark(LinkMark::loss);
    replicas_[0]->batch_loss(logits_.data(), labels_.data(), dlogits_.data(), rows, global_batch);
  }

  void scatter_dlogits(std::span<const Shard> shards) override {
    mark(LinkMark::scatter);
    for (std::size_t r = 0; r < replicas_.size(); ++r) {
      const Shard& s = shards[r];
      if (s.count == 0) continue;
      std::copy_n(dlogits_.begin() + static_cast<std::ptrdiff_t>(s.first) * kClasses,
                  static_cast<std::size_t>(s.count) * kClasses, replicas_[r]->shard_buffers(s.count).dlogits);
    }
    mark(LinkMark::scatter_end);
  }

  void reduce_gradients() override {
    mark(LinkMark::reduce);
    // The host communicator's sum over the parameters' slots (replica 0's loss slot is the batch's loss).
    sum_into_first(replicas_, ParamLayout::kCount);
    mark(LinkMark::reduce_end);
    if (trace_remaining_ > 0) --trace_remaining_;
  }

 private:
  // Host clocks, on the trace clock every replica's marks use.
  void mark(LinkMark m) {
    if (trace_remaining_ > 0) trace_.back()[static_cast<std::size_t>(m)] = trace_clock_us();
  }

  std::vector<Replica*> replicas_;
  // Device 0's batch buffers: [rows, 10], [rows], [rows, 10].
  std::vector<float> logits_;
  std::vector<std::uint8_t> labels_;
  std::vector<float> dlogits_;
  long trace_remaining_ = 0;
  std::vector<LinkStepMarks> trace_;  // [traced step]
};

}  // namespace

Replica::ShardBuffers Replica::shard_buffers(int /*rows*/) {
  no_data_parallel(*this);
}

void Replica::forward_logits(int /*first*/, int /*count*/) {
  no_data_parallel(*this);
}

void Replica::batch_loss(const float* /*logits*/, const std::uint8_t* /*labels*/, float* /*dlogits*/,
                         int /*rows*/, int /*global_batch*/) {
  no_data_parallel(*this);
}

void Replica::backward_from_dlogits(int /*count*/) {
  no_data_parallel(*this);
}

std::unique_ptr<DataParallelLinks> make_host_data_parallel_links(std::span<Replica* const> replicas) {
  return std::make_unique<HostDataParallelLinks>(replicas);
}

namespace {

// The step of the header's comment, over the links.
class DataParallelStrategy final : public Strategy {
 public:
  explicit DataParallelStrategy(std::unique_ptr<DataParallelLinks> links) : links_(std::move(links)) {
    if (!links_) throw std::invalid_argument("nn.DataParallel's step: no links");
  }

  std::string description() const override { return links_->description(); }
  bool every_replica_steps() const override { return false; }
  bool across_processes() const override { return false; }
  TraceStrategy trace_phases() const override { return TraceStrategy::dataparallel; }
  void trace_steps(long steps) override { links_->trace_steps(steps); }
  std::vector<LinkStepMarks> take_link_trace() override { return links_->take_trace(); }

  void step(const ReplicaSet& set, const StepRows& rows, const SgdConfig& sgd) override {
    const std::span<Replica* const> replicas = set.replicas;
    const int micro_batches = rows.micro_batches();
    // Each micro-batch is a whole forward and backward of nn.DataParallel's (a module called K times before
    // optimizer.step()), its gradients reduced onto device 0 and added there to those kept from the
    // micro-batches before, as autograd accumulates them into device 0's .grad.
    for (int m = 0; m < micro_batches; ++m) {
      const bool last = m + 1 == micro_batches;
      if (m > 0) replicas[0]->keep_gradients();
      micro_batch(set, rows.micro_first(m), rows.micro_count(m), rows.rows);
      if (m > 0) replicas[0]->add_kept_gradients();
      if (!last) replicas[0]->no_sgd_step();
    }
    replicas[0]->sgd_step(sgd);
  }

 private:
  // Rows [first, first + count) of the epoch's order, to the gradients on device 0 (scaled by
  // 1 / global_batch).
  void micro_batch(const ReplicaSet& set, int first, int count, int global_batch) {
    const std::span<Replica* const> replicas = set.replicas;
    const int n = static_cast<int>(replicas.size());
    std::vector<Shard> shards;
    for (int r = 0; r < n; ++r)
      shards.push_back(shard_of(count, n, r));
    links_->broadcast_parameters();
    set.workers.run([&](int r) {
      const Shard& s = shards[static_cast<std::size_t>(r)];
      replicas[static_cast<std::size_t>(r)]->forward_logits(first + s.first, s.count);
    });
    links_->gather_and_take_loss(shards, count, global_batch);
    links_->scatter_dlogits(shards);
    set.workers.run([&](int r) {
      Replica& replica = *replicas[static_cast<std::size_t>(r)];
      replica.backward_from_dlogits(shards[static_cast<std::size_t>(r)].count);
      if (r > 0) replica.no_sgd_step();
    });
    links_->reduce_gradients();
  }

  std::unique_ptr<DataParallelLinks> links_;
};

}  // namespace

std::unique_ptr<Strategy> make_data_parallel_strategy(std::unique_ptr<DataParallelLinks> links) {
  return std::make_unique<DataParallelStrategy>(std::move(links));
}

}  // namespace mnistdp
