// The epoch's order made on the device (cuda::epoch_order, CudaReplica::make_epoch_order): the host's
// permutation to the last row, for any seed and epoch, and with nothing copied from the host.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "host/cuda/cuda_replica.hpp"
#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "kernels/cuda/thrust/epoch_order.hpp"
#include "kernels/cuda/thrust/scratch.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/synthetic_data.hpp"

using namespace mnistdp;
using namespace mnistdp::gpu_test;

namespace {

bool is_permutation_of_rows(std::vector<std::int32_t> order) {
  std::sort(order.begin(), order.end());
  for (std::size_t i = 0; i < order.size(); ++i)
    if (order[i] != static_cast<std::int32_t>(i)) return false;
  return true;
}

std::vector<std::int32_t> host_order(int count, std::uint64_t seed, int epoch) {
  std::vector<std::int32_t> order(static_cast<std::size_t>(count));
  epoch_order(order, seed, epoch);
  return order;
}

}  // namespace

TEST_CASE("the device's epoch order is the host's, and a permutation", "[gpu][order]") {
  const int count = GENERATE(1, 2, 3, 100, 4097, 60000);
  CAPTURE(count);
  DeviceBuffer<std::int32_t> order(static_cast<std::size_t>(count));
  DeviceBuffer<std::uint64_t> keys(static_cast<std::size_t>(count));
  ThrustScratch scratch;
  Stream stream;
  std::vector<std::vector<std::int32_t>> seen;
  for (const std::uint64_t seed :
       {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{42}, ~std::uint64_t{0}}) {
    for (const int epoch : {0, 1, 2, 99}) {
      CAPTURE(seed, epoch);
      poison(order);
      cuda::epoch_order(order.data(), keys.data(), count, epoch_shuffle_seed(seed, epoch), scratch,
                        stream.get());
      const std::vector<std::int32_t> device = to_host(order);
      const std::vector<std::int32_t> host = host_order(count, seed, epoch);
      REQUIRE(is_permutation_of_rows(host));
      REQUIRE(is_permutation_of_rows(device));
      REQUIRE(device == host);
      seen.push_back(device);
    }
  }
  // A shuffle, not the identity, and a different one for each seed and epoch.
  if (count >= 100) {
    std::vector<std::int32_t> identity(static_cast<std::size_t>(count));
    std::iota(identity.begin(), identity.end(), 0);
    for (std::size_t i = 0; i < seen.size(); ++i) {
      CHECK(seen[i] != identity);
      for (std::size_t j = 0; j < i; ++j)
        CHECK(seen[i] != seen[j]);
    }
  }
  // The first allocation is kept: the later sorts allocate nothing (emulated too: its Thrust takes its
  // temporaries from the same scratch, tests/gpu/test_thrust_scratch_cuda.cpp).
  CHECK(scratch.allocations() == 1);
}

TEST_CASE("an empty training set's order is empty", "[gpu][order]") {
  ThrustScratch scratch;
  Stream stream;
  cuda::epoch_order(nullptr, nullptr, 0, 1, scratch, stream.get());
  stream.synchronize();
  CHECK(scratch.allocations() == 0);
}

TEST_CASE("a replica that makes its own order trains on the rows the host's order gives",
          "[gpu][replica][order]") {
  const DataSplits data = testing::synthetic_splits(300, 20, 3);
  CudaReplica own(data, 0, CudaStepOptions{});
  CudaReplica given(data, 0, CudaStepOptions{});
  std::vector<float> params(ParamLayout::kCount);
  init_parameters(params, 5);
  own.load_parameters(params);
  given.load_parameters(params);
  for (const int epoch : {0, 3}) {
    own.make_epoch_order(7, epoch);
    given.set_epoch_order(host_order(data.train.count, 7, epoch));
    for (const int first : {0, 64, 236}) {
      CAPTURE(epoch, first);
      own.compute_gradients(first, 64, 64);
      given.compute_gradients(first, 64, 64);
      const auto a = to_host(own.gradient_buffer(), ParamLayout::kGradCount);
      const auto b = to_host(given.gradient_buffer(), ParamLayout::kGradCount);
      REQUIRE(bitwise_equal(a, b));
    }
  }
}

#if defined(MNISTDP_CUDA_EMULATED)
TEST_CASE("a replica's epoch order copies nothing from the host", "[gpu][replica][order]") {
  const DataSplits data = testing::synthetic_splits(300, 20, 3);
  CudaReplica replica(data, 0, CudaStepOptions{});
  std::vector<float> params(ParamLayout::kCount);
  init_parameters(params, 5);
  replica.load_parameters(params);
  const std::uint64_t before = emu::host_to_device_copies();
  for (int epoch = 0; epoch < 3; ++epoch) {
    replica.make_epoch_order(11, epoch);
    replica.compute_gradients(0, 64, 64);
  }
  static_cast<void>(replica.loss_sum());
  CHECK(emu::host_to_device_copies() - before == 0);
  // The order given by the caller instead is one copy, the way the trainer's order came before.
  replica.set_epoch_order(host_order(data.train.count, 11, 3));
  CHECK(emu::host_to_device_copies() - before == 1);
}
#endif
