#include "host/communicator.hpp"

#include <algorithm>

#include "host/params.hpp"

namespace mnistdp {

namespace {

class HostCommunicator final : public Communicator {
 public:
  std::string description() const override { return "in-process sum over host buffers"; }

  void all_reduce_gradients(std::span<Replica* const> replicas) override {
    if (replicas.size() < 2) return;
    float* sum = replicas[0]->gradient_buffer();
    for (std::size_t r = 1; r < replicas.size(); ++r) {
      const float* part = replicas[r]->gradient_buffer();
      for (std::size_t i = 0; i < ParamLayout::kGradCount; ++i)
        sum[i] += part[i];
    }
    for (std::size_t r = 1; r < replicas.size(); ++r)
      std::copy(sum, sum + ParamLayout::kGradCount, replicas[r]->gradient_buffer());
  }
};

}  // namespace

std::unique_ptr<Communicator> make_host_communicator() {
  return std::make_unique<HostCommunicator>();
}

}  // namespace mnistdp
