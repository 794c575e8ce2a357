#include "host/training/communicator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "host/model/params.hpp"

namespace mnistdp {

void sum_into_first(std::span<Replica* const> replicas, std::size_t count) {
  float* sum = replicas[0]->gradient_buffer();
  for (std::size_t r = 1; r < replicas.size(); ++r) {
    const float* part = replicas[r]->gradient_buffer();
    for (std::size_t i = 0; i < count; ++i)
      sum[i] += part[i];
  }
}

void Communicator::reduce_scatter_gradients(std::span<Replica* const> /*replicas*/,
                                            std::span<const Shard> /*shards*/) {
  throw std::logic_error(fmt::format("{}: no reduce-scatter (--strategy zero1)", description()));
}

void Communicator::all_gather_parameters(std::span<Replica* const> /*replicas*/,
                                         std::span<const Shard> /*shards*/) {
  throw std::logic_error(fmt::format("{}: no all-gather (--strategy zero1)", description()));
}

namespace {

void copy_first_to_others(std::span<Replica* const> replicas) {
  const float* sum = replicas[0]->gradient_buffer();
  for (std::size_t r = 1; r < replicas.size(); ++r)
    std::copy(sum, sum + ParamLayout::kGradCount, replicas[r]->gradient_buffer());
}

class HostCommunicator final : public Communicator {
 public:
  std::string description() const override { return "in-process sum over host buffers"; }

  void all_reduce_gradients(std::span<Replica* const> replicas) override {
    if (replicas.size() < 2) return;
    sum_into_first(replicas, ParamLayout::kGradCount);
    copy_first_to_others(replicas);
  }

  void reduce_scatter_gradients(std::span<Replica* const> replicas, std::span<const Shard> shards) override {
    check_shards(replicas, shards);
    if (replicas.size() < 2) return;  // a lone replica's buffer is the sum (and may be a device's)
    std::vector<float*> buffers;
    for (Replica* r : replicas)
      buffers.push_back(r->gradient_buffer());
    // Each element read from every replica and written to its shard's owner: ((b0 + b1) + b2) + ..., the
    // all-reduce's order, whoever owns it.
    auto sum_into = [&](float* out, std::size_t first, std::size_t count) {
      for (std::size_t i = first; i < first + count; ++i) {
        float sum = buffers[0][i];
        for (std::size_t q = 1; q < buffers.size(); ++q)
          sum += buffers[q][i];
        out[i] = sum;
      }
    };
    for (std::size_t r = 0; r < buffers.size(); ++r)
      sum_into(buffers[r], static_cast<std::size_t>(shards[r].first),
               static_cast<std::size_t>(shards[r].count));
    sum_into(buffers[0], ParamLayout::kLossSlot, 1);
    for (std::size_t r = 1; r < buffers.size(); ++r)
      buffers[r][ParamLayout::kLossSlot] = buffers[0][ParamLayout::kLossSlot];
  }

  void all_gather_parameters(std::span<Replica* const> replicas, std::span<const Shard> shards) override {
    check_shards(replicas, shards);
    if (replicas.size() < 2) return;
    for (std::size_t owner = 0; owner < replicas.size(); ++owner) {
      const float* from = replicas[owner]->parameter_buffer() + shards[owner].first;
      for (std::size_t r = 0; r < replicas.size(); ++r)
        if (r != owner)
          std::copy_n(from, shards[owner].count, replicas[r]->parameter_buffer() + shards[owner].first);
    }
  }

 private:
  static void check_shards(std::span<Replica* const> replicas, std::span<const Shard> shards) {
    if (shards.size() != replicas.size())
      throw std::invalid_argument(
          fmt::format("the in-process sum: {} shards for {} replicas", shards.size(), replicas.size()));
  }
};

class ProcessGroupCommunicator final : public Communicator {
 public:
  explicit ProcessGroupCommunicator(ProcessGroup& group) : group_(group) {}

  std::string description() const override {
    return "in-process sum over host buffers, then across processes: " + group_.description();
  }

  void all_reduce_gradients(std::span<Replica* const> replicas) override {
    if (replicas.empty()) return;
    sum_into_first(replicas, ParamLayout::kGradCount);
    group_.all_reduce_sum(std::span(replicas[0]->gradient_buffer(), ParamLayout::kGradCount));
    copy_first_to_others(replicas);
  }

 private:
  ProcessGroup& group_;
};

}  // namespace

std::unique_ptr<Communicator> make_host_communicator() {
  return std::make_unique<HostCommunicator>();
}

std::unique_ptr<Communicator> make_process_group_communicator(ProcessGroup& group) {
  return std::make_unique<ProcessGroupCommunicator>(group);
}

}  // namespace mnistdp
