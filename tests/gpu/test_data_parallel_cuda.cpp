// Data parallelism on CUDA replicas: N replicas on one GPU (the same-device communicator) and one replica per
// GPU (NCCL) train to the parameters of one replica on the whole batch, the short last batch of an epoch and
// replicas without rows included, with every replica bit-identical to replica 0 after every step. And the
// same-device communicator's kernel adds in replica order, to the bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "host/cpu/cpu_replica.hpp"
#include "host/cuda/cuda_communicators.hpp"
#include "host/cuda/cuda_replica.hpp"
#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "host/training/shard.hpp"
#include "host/training/trainer.hpp"
#include "kernels/cuda/ops/replica_sum.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/synthetic_data.hpp"

using namespace mnistdp;
using namespace mnistdp::gpu_test;

namespace {

using L = ParamLayout;

constexpr int kBatch = 64;
// Two epochs (each of 10 steps; 2 under a sanitizer).
constexpr int kFullBatches = kUnderSanitizer ? 1 : 9;
constexpr int kSteps = 2 * (kFullBatches + 1);
constexpr std::uint64_t kSeed = 3;

// kFullBatches full batches of 64 and a last one of max(1, replicas - 1) rows: the last batch of each epoch
// is both short and smaller than the replica count (1 row over 2 replicas gives 1, 0; 7 over 8 gives seven 1s
// and a 0), so that a replica without rows takes part in the all-reduce.
int train_rows(int replicas) {
  return kFullBatches * kBatch + std::max(1, replicas - 1);
}

enum class Reduce { none, same_device, nccl };

const char* reduce_name(Reduce r) {
  switch (r) {
    case Reduce::none:
      return "none (one replica)";
    case Reduce::same_device:
      return "same device";
    case Reduce::nccl:
      return "NCCL";
  }
  return "?";
}

// Counts the steps, records every logged loss and, when asked to compare, checks after every step that all
// replicas hold bit-identical parameters (which waits for every replica's stream).
class Observer final : public TrainListener {
 public:
  Observer(const std::vector<std::unique_ptr<Replica>>& replicas, bool compare)
      : replicas_(replicas), compare_(compare) {}

  void on_step_loss(const StepLoss& s) override { losses.push_back(s.loss); }

  void on_step(int epoch, int step, int /*steps_in_epoch*/) override {
    ++steps;
    if (!compare_ || replicas_.size() < 2 || !first_divergence.empty()) return;
    std::vector<float> reference(L::kCount), other(L::kCount);
    replicas_[0]->store_parameters(reference);
    for (std::size_t r = 1; r < replicas_.size(); ++r) {
      replicas_[r]->store_parameters(other);
      if (!bitwise_equal(reference, other)) {
        first_divergence = "epoch " + std::to_string(epoch) + ", step " + std::to_string(step) +
                           ": replica " + std::to_string(r) + " differs from replica 0";
        return;
      }
    }
  }

  std::vector<float> losses;
  int steps = 0;
  std::string first_divergence;  // empty while all replicas agree

 private:
  const std::vector<std::unique_ptr<Replica>>& replicas_;
  bool compare_;
};

struct RunResult {
  std::vector<float> losses;               // [steps]: the global batch's mean loss
  std::vector<std::vector<float>> params;  // [replicas][kCount], after the run
  int steps = 0;
  std::string divergence;
  std::string description;  // the communicator's
};

// One replica per entry of `devices` (an entry may repeat: several replicas on one GPU), trained by the
// Trainer for two epochs (kSteps steps) with the given all-reduce. observe: record every step's loss and
// compare the replicas after every step, which waits for the device after every step; without it the host
// never waits until the run is over, so that the streams run as far ahead of the host, and of each other, as
// they can, and a missing edge between them has the most room to show.
RunResult train(const DataSplits& data, const std::vector<int>& devices, Reduce reduce, const SgdConfig& sgd,
                bool observe = true) {
  std::vector<std::unique_ptr<Replica>> replicas;
  std::vector<Replica*> raw;
  for (int device : devices) {
    replicas.push_back(make_cuda_replica(data, device, {GemmImpl::blocked}));
    raw.push_back(replicas.back().get());
  }
  // Replica 0 gets the initial parameters and the others different ones: the trainer must broadcast replica
  // 0's, as DistributedDataParallel does at construction.
  std::vector<float> init(L::kCount);
  init_parameters(init, kSeed);
  replicas[0]->load_parameters(init);
  init_parameters(init, kSeed + 1);
  for (std::size_t r = 1; r < replicas.size(); ++r)
    replicas[r]->load_parameters(init);

  // The communicator is made from the raw pointers before the trainer takes the replicas over.
  std::unique_ptr<Communicator> communicator;
  switch (reduce) {
    case Reduce::none:
      REQUIRE(replicas.size() == 1);
      communicator = make_host_communicator();  // a no-op for one replica: the reference run
      break;
    case Reduce::same_device:
      communicator = make_same_device_communicator(raw);
      break;
    case Reduce::nccl:
      communicator = make_nccl_communicator(raw);
      break;
  }
  RunResult result;
  result.description = communicator->description();

  TrainConfig config;
  config.epochs = 2;
  config.batch_size = kBatch;
  config.sgd = sgd;
  config.seed = kSeed;
  config.log_interval = observe ? 1 : 0;  // the loss of every step, or none
  config.evaluate = false;
  // The trainer destroys the communicator before the replicas whose streams it uses.
  Trainer trainer(std::move(replicas), std::move(communicator), data.train.count, config);
  Observer observer(trainer.replicas(), observe);
  for (const EpochReport& report : trainer.run(observer))
    result.steps += report.steps;
  REQUIRE(observer.steps == result.steps);
  result.losses = observer.losses;
  result.divergence = observer.first_divergence;
  for (const auto& replica : trainer.replicas()) {
    result.params.emplace_back(L::kCount);
    replica->store_parameters(result.params.back());
  }
  return result;
}

// The normwise error of each tensor against its own norm, so that a failure says where it is: a ReLU unit
// that float rounding flipped between the two runs (a pre-activation within an ulp or so of zero) shows up as
// a large error in fc1 alone, a broken reduction everywhere.
std::string tensor_errors(const std::vector<float>& got, const std::vector<float>& want) {
  struct Range {
    const char* name;
    std::size_t from, to;
  };
  std::string text;
  for (const Range r :
       {Range{"fc1.weight", L::kFc1Weight, L::kFc1Bias}, Range{"fc1.bias", L::kFc1Bias, L::kFc2Weight},
        Range{"fc2.weight", L::kFc2Weight, L::kFc2Bias}, Range{"fc2.bias", L::kFc2Bias, L::kCount}}) {
    const std::vector<float> g(got.begin() + static_cast<long>(r.from),
                               got.begin() + static_cast<long>(r.to));
    const std::vector<float> w(want.begin() + static_cast<long>(r.from),
                               want.begin() + static_cast<long>(r.to));
    text += std::string(text.empty() ? "" : ", ") + r.name + " " + std::to_string(max_rel_error(g, w));
  }
  return text;
}

// The data-parallel run against the one-replica run: parameters within rtol 1e-5 (normwise), every step's
// loss within 1e-5, every replica bit-identical to replica 0 after every step.
void check_equivalent(const RunResult& parallel, const RunResult& single) {
  INFO(parallel.description);
  REQUIRE(single.steps == kSteps);
  REQUIRE(parallel.steps == kSteps);
  CHECK(parallel.divergence.empty());
  CAPTURE(parallel.divergence);
  for (std::size_t r = 1; r < parallel.params.size(); ++r) {
    CAPTURE(r);
    CHECK(bitwise_equal(parallel.params[r], parallel.params[0]));
  }
  CAPTURE(tensor_errors(parallel.params[0], single.params[0]));
  CHECK(max_rel_error(parallel.params[0], single.params[0]) <= 1e-5);
  REQUIRE(parallel.losses.size() == static_cast<std::size_t>(kSteps));
  REQUIRE(single.losses.size() == static_cast<std::size_t>(kSteps));
  for (int s = 0; s < kSteps; ++s) {
    const auto i = static_cast<std::size_t>(s);
    CAPTURE(s, parallel.losses[i], single.losses[i]);
    CHECK(rel_error(parallel.losses[i], single.losses[i]) <= 1e-5);
  }
}

SgdConfig sgd_with_momentum(float momentum) {
  SgdConfig sgd;  // lr 0.01, the reference program's
  sgd.momentum = momentum;
  return sgd;
}

int device_count() {
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  return count;
}

}  // namespace

TEST_CASE("N replicas on one GPU train to the parameters of one replica", "[gpu][data_parallel]") {
  const int replicas = GENERATE(from_range(sweep({2, 3, 5, 8}, {2, 5})));
  // Under a sanitizer, with momentum alone: its step reads and writes one buffer more.
  const float momentum = GENERATE(from_range(sweep<float>({0.0f, 0.9f}, {0.9f})));
  CAPTURE(replicas, momentum);
  const SgdConfig sgd = sgd_with_momentum(momentum);
  const DataSplits data = testing::synthetic_splits(train_rows(replicas), 10, 21);
  // The last batch really is smaller than the replica count, so some replica gets no rows.
  REQUIRE(data.train.count % kBatch < replicas);
  REQUIRE(shard_of(data.train.count % kBatch, replicas, replicas - 1).count == 0);

  const RunResult single = train(data, {0}, Reduce::none, sgd);
  const RunResult parallel =
      train(data, std::vector<int>(static_cast<std::size_t>(replicas), 0), Reduce::same_device, sgd);
  check_equivalent(parallel, single);
  // It trained: the comparison is not one of two flat lines. (The last full batch against the first: the
  // last step's batch is the epoch's short one.)
  CHECK(single.losses[kSteps - 2] < single.losses.front());
}

TEST_CASE("the same-device all-reduce gives the same bits with and without host synchronisation",
          "[gpu][data_parallel]") {
  // The sum is deterministic, so a run in which the host never waits must end with exactly the parameters of
  // a run that waits for the device after every step. A race between the replicas' streams (a copy reading
  // replica 0's buffer while its next step overwrites it, a sum reading a buffer not yet written) would show
  // up as a difference here, or between two unsynchronised runs.
  const int replicas = GENERATE(from_range(sweep({3, 8}, {3})));
  CAPTURE(replicas);
  const DataSplits data = testing::synthetic_splits(train_rows(replicas), 10, 21);
  const SgdConfig sgd = sgd_with_momentum(0.9f);
  const std::vector<int> devices(static_cast<std::size_t>(replicas), 0);
  const RunResult synchronised = train(data, devices, Reduce::same_device, sgd);
  REQUIRE(synchronised.divergence.empty());
  for (int run = 0; run < 2; ++run) {
    CAPTURE(run);
    const RunResult free_running = train(data, devices, Reduce::same_device, sgd, /*observe=*/false);
    REQUIRE(free_running.steps == kSteps);
    for (std::size_t r = 0; r < free_running.params.size(); ++r) {
      CAPTURE(r);
      CHECK(bitwise_equal(free_running.params[r], synchronised.params[0]));
    }
  }
}

TEST_CASE("one replica through either CUDA communicator is the one-replica run, to the bit",
          "[gpu][data_parallel]") {
  // World size 1: NCCL's all-reduce of one rank and the same-device sum of one buffer leave it as it is.
  const Reduce reduce = GENERATE(Reduce::same_device, Reduce::nccl);
  CAPTURE(reduce_name(reduce));
  const DataSplits data = testing::synthetic_splits(train_rows(1), 10, 21);
  const SgdConfig sgd = sgd_with_momentum(0.9f);
  const RunResult single = train(data, {0}, Reduce::none, sgd);
  const RunResult through = train(data, {0}, reduce, sgd);
  check_equivalent(through, single);
  CHECK(bitwise_equal(through.params[0], single.params[0]));
  CHECK(bitwise_equal(through.losses, single.losses));
}

TEST_CASE("NCCL over several GPUs trains to the parameters of one replica", "[gpu][data_parallel][nccl]") {
  const int count = device_count();
  if (count < 2)
    skip_test("only " + std::to_string(count) + " CUDA device visible; this test needs 2 or more");
  // Two GPUs, and all of them when there are more.
  std::vector<int> sizes{2};
  if (count > 2) sizes.push_back(count);
  for (const int world : sizes) {
    for (const float momentum : sweep<float>({0.0f, 0.9f}, {0.9f})) {
      CAPTURE(world, momentum);
      const SgdConfig sgd = sgd_with_momentum(momentum);
      const DataSplits data = testing::synthetic_splits(train_rows(world), 10, 21);
      std::vector<int> devices(static_cast<std::size_t>(world));
      std::iota(devices.begin(), devices.end(), 0);
      const RunResult single = train(data, {0}, Reduce::none, sgd);
      const RunResult parallel = train(data, devices, Reduce::nccl, sgd);
      check_equivalent(parallel, single);
    }
  }
}

TEST_CASE("the CUDA communicators check their replicas and describe themselves", "[gpu][data_parallel]") {
  const DataSplits data = testing::synthetic_splits(100, 10, 5);
  auto a = make_cuda_replica(data, 0, {GemmImpl::blocked});
  auto b = make_cuda_replica(data, 0, {GemmImpl::blocked});
  CpuReplica cpu(data, 0);

  const std::vector<Replica*> none;
  CHECK_THROWS_AS(make_nccl_communicator(none), std::invalid_argument);
  CHECK_THROWS_AS(make_same_device_communicator(none), std::invalid_argument);

  const std::vector<Replica*> mixed{a.get(), &cpu};
  CHECK_THROWS_WITH(make_same_device_communicator(mixed),
                    Catch::Contains("replica 1") && Catch::Contains("not a CUDA replica"));
  CHECK_THROWS_WITH(make_nccl_communicator(mixed), Catch::Contains("not a CUDA replica"));

  // NCCL refuses two ranks on one GPU; the message names the device and the way out.
  const std::vector<Replica*> both{a.get(), b.get()};
  CHECK_THROWS_WITH(make_nccl_communicator(both),
                    Catch::Contains("cuda:0") && Catch::Contains("same-device"));

  const auto same = make_same_device_communicator(both);
  CHECK(same->description().find("cuda:0") != std::string::npos);
  CHECK(same->description().find("2 replicas") != std::string::npos);
  // all_reduce_gradients takes the replicas the communicator was made for, in their order.
  const std::vector<Replica*> swapped{b.get(), a.get()};
  CHECK_THROWS_AS(same->all_reduce_gradients(swapped), std::logic_error);
  const std::vector<Replica*> fewer{a.get()};
  CHECK_THROWS_AS(same->all_reduce_gradients(fewer), std::logic_error);

  const std::vector<Replica*> one{a.get()};
  const auto nccl = make_nccl_communicator(one);
  CHECK(nccl->description().rfind("NCCL 2.", 0) == 0);
  CHECK(nccl->description().find("over 1 GPU") != std::string::npos);

  if (device_count() >= 2) {
    auto c = make_cuda_replica(data, 1, {GemmImpl::blocked});
    const std::vector<Replica*> spread{a.get(), c.get()};
    CHECK_THROWS_WITH(make_same_device_communicator(spread),
                      Catch::Contains("cuda:1") && Catch::Contains("NCCL"));
  }
}

TEST_CASE("the same-device sum adds the buffers in replica order, to the bit", "[gpu][reduce]") {
  struct Case {
    int replicas;
    std::size_t n;
  };
  // Sizes around the block size, the gradient buffer's, and one past the grid-stride limit (4096 blocks of
  // 256 threads: a million emulated threads, minutes under a sanitizer, which preset emu runs instead).
  constexpr std::size_t kPastStrideLimit = 1100003;
  std::vector<Case> cases{
      {1, 1000},          {2, L::kGradCount},    {3, 1},     {3, 257},   {5, L::kGradCount},
      {8, L::kGradCount}, {3, kPastStrideLimit}, {64, 4099}, {100, 1000}};
  if (kUnderSanitizer)
    cases.erase(
        std::remove_if(cases.begin(), cases.end(), [](const Case& k) { return k.n == kPastStrideLimit; }),
        cases.end());
  const Case c = GENERATE_COPY(from_range(cases));
  CAPTURE(c.replicas, c.n);
  Rng rng(1000u * static_cast<unsigned>(c.replicas) + c.n);

  // Magnitudes from 2^-20 to 2^20, both signs: the order of the additions then changes the rounding.
  std::vector<std::vector<float>> host(static_cast<std::size_t>(c.replicas));
  std::vector<DeviceBuffer<float>> device;
  std::vector<const float*> table;
  for (auto& values : host) {
    values.resize(c.n);
    for (float& v : values)
      v = std::ldexp(rng.uniform(-1.0f, 1.0f), static_cast<int>(rng.below(41)) - 20);
    device.push_back(to_device(values));
    table.push_back(device.back().data());
  }
  const DeviceBuffer<const float*> device_table = to_device(table);

  // The host communicator's order: sum = ((b0 + b1) + b2) + ...
  std::vector<float> want = host[0];
  for (std::size_t r = 1; r < host.size(); ++r)
    for (std::size_t i = 0; i < c.n; ++i)
      want[i] += host[r][i];

  Stream stream;
  DeviceBuffer<float> out(c.n);
  poison(out);
  cuda::sum_in_order(device_table.data(), c.replicas, out.data(), c.n, stream.get());
  stream.synchronize();
  CHECK(bitwise_equal(to_host(out), want));

  if (c.replicas >= 3 && c.n >= 1000) {
    // The test can tell the order: summed backwards, these inputs round differently somewhere.
    std::vector<float> backwards = host.back();
    for (std::size_t r = host.size() - 1; r-- > 0;)
      for (std::size_t i = 0; i < c.n; ++i)
        backwards[i] += host[r][i];
    CHECK_FALSE(bitwise_equal(backwards, want));
  }

  // In place, as the communicator uses it: the sum lands in buffer 0, the other buffers stay as they were.
  cuda::sum_in_order(device_table.data(), c.replicas, device[0].data(), c.n, stream.get());
  stream.synchronize();
  CHECK(bitwise_equal(to_host(device[0]), want));
  for (std::size_t r = 1; r < host.size(); ++r)
    CHECK(bitwise_equal(to_host(device[r]), host[r]));

  // In place into the last buffer, as ZeRO-1's reduce-scatter writes a shard's sum into its owner's: the
  // same order of additions, whichever buffer receives it.
  if (c.replicas >= 2) {
    device[0] = to_device(host[0]);
    table[0] = device[0].data();
    const DeviceBuffer<const float*> again = to_device(table);
    cuda::sum_in_order(again.data(), c.replicas, device.back().data(), c.n, stream.get());
    stream.synchronize();
    CHECK(bitwise_equal(to_host(device.back()), want));
    for (std::size_t r = 0; r + 1 < host.size(); ++r)
      CHECK(bitwise_equal(to_host(device[r]), host[r]));
  }

  CHECK_THROWS_AS(cuda::sum_in_order(device_table.data(), 0, out.data(), c.n, stream.get()),
                  std::invalid_argument);
}
