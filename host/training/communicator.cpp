#include "host/training/communicator.hpp"

#include <algorithm>

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
