// The one invariant of data parallelism, on CPU replicas: N replicas train to the same parameters as one
// replica on the whole batch, whatever the shard sizes, the short last batch of an epoch and empty replicas
// included.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "host/cpu/cpu_replica.hpp"
#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "host/training/replica_workers.hpp"
#include "host/training/shard.hpp"
#include "host/training/trainer.hpp"
#include "tests/forwarding_replica.hpp"
#include "tests/loss_recorder.hpp"
#include "tests/synthetic_data.hpp"

using namespace mnistdp;

namespace {

// 581 rows: 9 full batches of 64 and a last one of 5, so two epochs are 20 steps, and with 8 or 64 replicas
// the last batch of each epoch leaves some replicas without rows.
constexpr int kTrainRows = 581;

// The mistake the invariant guards against: each replica averaging over its own shard (then over the
// replicas), instead of scaling by the global batch. Equal to the right thing only when every shard has the
// same size.
class ShardMeanReplica final : public testing::ForwardingReplica {
 public:
  ShardMeanReplica(std::unique_ptr<Replica> inner, int replicas)
      : ForwardingReplica(std::move(inner)), replicas_(replicas) {}
  void compute_gradients(int first, int count, int global_batch) override {
    ForwardingReplica::compute_gradients(first, count, count > 0 ? count * replicas_ : global_batch);
  }

 private:
  int replicas_;
};

using testing::LossRecorder;

struct RunResult {
  std::vector<std::vector<float>> params;  // [replica][kCount]
  std::vector<float> losses;               // every step
  int steps = 0;
};

RunResult run(const DataSplits& data, int replicas, SgdConfig sgd, bool shard_mean_mistake = false,
              int threads = 1) {
  std::vector<std::unique_ptr<Replica>> list;
  for (int r = 0; r < replicas; ++r) {
    std::unique_ptr<Replica> replica = std::make_unique<CpuReplica>(data, r, threads);
    if (shard_mean_mistake) replica = std::make_unique<ShardMeanReplica>(std::move(replica), replicas);
    list.push_back(std::move(replica));
  }
  std::vector<float> init(ParamLayout::kCount);
  init_parameters(init, 3);
  // Only replica 0 gets the initial parameters: the trainer must broadcast them.
  list[0]->load_parameters(init);

  TrainConfig config;
  config.epochs = 2;
  config.sgd = sgd;
  config.seed = 3;
  config.log_interval = 1;
  config.evaluate = false;
  config.check_replicas = 1;  // bit-identical replicas after every step, or ReplicaDivergence
  Trainer trainer(std::move(list), make_host_communicator(), data.train.count, config);
  LossRecorder recorder;
  RunResult result;
  for (const EpochReport& r : trainer.run(recorder))
    result.steps += r.steps;
  result.losses = recorder.losses;
  for (const auto& replica : trainer.replicas()) {
    result.params.emplace_back(ParamLayout::kCount);
    replica->store_parameters(result.params.back());
  }
  return result;
}

// Largest |a - b| relative to the largest |b|: rounding differences from a different summation order are
// relative to the magnitudes being summed, so a per-element ratio would flag harmless near-zero entries.
double normwise_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

// The first index at which a and b differ (bits, as memcmp sees them), or -1: a failure names one parameter
// instead of printing two vectors of 203,530.
long first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<long>(i);
  return a.size() == b.size() ? -1 : static_cast<long>(a.size());
}

}  // namespace

TEST_CASE("N CPU replicas train to the parameters of one replica", "[data_parallel]") {
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 21);
  SgdConfig sgd;  // lr 0.01, the reference program's; the loss then stays well away from 0 in 20 steps
  sgd.momentum = GENERATE(0.0f, 0.9f);
  const RunResult single = run(data, 1, sgd);
  REQUIRE(single.steps == 20);
  REQUIRE(single.losses.size() == 20);

  for (int replicas : {2, 3, 4, 5, 8, 64}) {
    INFO(replicas << " replicas, momentum " << sgd.momentum);
    const RunResult parallel = run(data, replicas, sgd);
    REQUIRE(parallel.steps == 20);
    // Every replica bit-identical to replica 0 (also checked after every step through check_replicas).
    for (int r = 1; r < replicas; ++r)
      CHECK(parallel.params[r] == parallel.params[0]);
    CHECK(normwise_difference(parallel.params[0], single.params[0]) <= 1e-5);
    REQUIRE(parallel.losses.size() == single.losses.size());
    for (std::size_t i = 0; i < single.losses.size(); ++i)
      CHECK(parallel.losses[i] == Approx(single.losses[i]).epsilon(1e-5));
  }
}

TEST_CASE("a CPU replica's threads give the bits of one thread", "[data_parallel]") {
  // Each element of every product is one sum in a fixed order, whichever thread computes it, so splitting a
  // step among threads changes no bit: not a tolerance, equality.
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 21);
  SgdConfig sgd;
  sgd.momentum = GENERATE(0.0f, 0.9f);
  for (int replicas : {1, 3}) {
    const RunResult one = run(data, replicas, sgd, false, 1);
    for (int threads : {2, 3, 5}) {
      INFO(replicas << " replicas of " << threads << " threads, momentum " << sgd.momentum);
      const RunResult many = run(data, replicas, sgd, false, threads);
      REQUIRE(many.steps == one.steps);
      CHECK(many.losses == one.losses);
      for (int r = 0; r < replicas; ++r)
        CHECK(many.params[r] == one.params[r]);
    }
  }
}

TEST_CASE("a lone CPU replica's fused step gives the bits of its two calls", "[data_parallel]") {
  // step_alone applies fc1's weight gradient as the product makes it; the same roundings in the same order as
  // ref::sgd_step on the stored gradient, so equality, not a tolerance. Batches of 200 rows take two passes
  // over k in the AVX-512 product (128 a pass), with the partial sums between them in the gradient buffer.
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 21);
  std::vector<float> init(ParamLayout::kCount);
  init_parameters(init, 3);
  SgdConfig sgd;
  sgd.weight_decay = GENERATE(0.0f, 0.01f);
  const int threads = GENERATE(1, 3);
  for (const int count : {1, 5, 64, 200}) {
    INFO(count << " rows, " << threads << " threads, weight decay " << sgd.weight_decay);
    CpuReplica fused(data, 0, threads), plain(data, 0, threads);
    for (CpuReplica* r : {&fused, &plain}) {
      r->load_parameters(init);
      r->make_epoch_order(3, 0);
    }
    for (int step = 0; step < 3; ++step) {
      const int first = step * std::min(count, 150);  // 3 steps of 200 rows overlap within the 581
      REQUIRE(fused.step_alone(first, count, sgd));
      plain.compute_gradients(first, count, count);
      plain.sgd_step(sgd);
      CHECK(fused.loss_sum() == plain.loss_sum());
    }
    std::vector<float> a(ParamLayout::kCount), b(ParamLayout::kCount);
    fused.store_parameters(a);
    plain.store_parameters(b);
    REQUIRE(a != init);
    CHECK(first_difference(a, b) == -1);
  }
}

TEST_CASE("a lone CPU replica leaves a step with momentum to the two calls", "[data_parallel]") {
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 21);
  std::vector<float> init(ParamLayout::kCount);
  init_parameters(init, 3);
  CpuReplica replica(data, 0);
  replica.load_parameters(init);
  replica.make_epoch_order(3, 0);
  SgdConfig sgd;
  sgd.momentum = 0.9f;
  REQUIRE_FALSE(replica.step_alone(0, 64, sgd));
  std::vector<float> after(ParamLayout::kCount);
  replica.store_parameters(after);
  CHECK(after == init);
  CHECK_FALSE(replica.has_momentum());
}

TEST_CASE("averaging gradients by shard instead of by global batch is caught", "[data_parallel]") {
  // 64 over 3 replicas gives shards of 22, 22 and 20: the mean of the shard means weights the rows unevenly.
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 21);
  SgdConfig sgd;
  sgd.lr = 0.05f;
  const RunResult single = run(data, 1, sgd);
  const RunResult right = run(data, 3, sgd);
  const RunResult wrong = run(data, 3, sgd, /*shard_mean_mistake=*/true);
  CHECK(normwise_difference(right.params[0], single.params[0]) <= 1e-5);
  CHECK(normwise_difference(wrong.params[0], single.params[0]) > 1e-4);
}

TEST_CASE("a replica that drifts is reported by --check-replicas", "[data_parallel]") {
  const DataSplits data = testing::synthetic_splits(200, 10, 4);
  std::vector<std::unique_ptr<Replica>> list;
  for (int r = 0; r < 2; ++r)
    list.push_back(std::make_unique<CpuReplica>(data, r));
  std::vector<float> init(ParamLayout::kCount);
  init_parameters(init, 1);
  list[0]->load_parameters(init);
  Replica* second = list[1].get();
  TrainConfig config;
  config.epochs = 1;
  config.evaluate = false;
  config.check_replicas = 2;
  Trainer trainer(std::move(list), make_host_communicator(), data.train.count, config);
  // Corrupt one weight of replica 1 after the broadcast: the check after step 2 must name it.
  std::vector<float> p(ParamLayout::kCount);
  second->store_parameters(p);
  p[ParamLayout::kFc2Bias + 3] += 1.0f;
  second->load_parameters(p);
  TrainListener quiet;
  CHECK_THROWS_WITH(trainer.run(quiet), Catch::Contains("after step 2") && Catch::Contains("replica 1") &&
                                            Catch::Contains("fc2.bias[3]"));
}

TEST_CASE("replica workers run every replica once per call and pass errors back", "[data_parallel]") {
  ReplicaWorkers workers(5);
  std::vector<int> calls(5, 0);
  for (int round = 0; round < 100; ++round)
    workers.run([&](int r) { ++calls[static_cast<std::size_t>(r)]; });
  CHECK(calls == std::vector<int>(5, 100));
  CHECK_THROWS_WITH(workers.run([](int r) {
    if (r == 3) throw std::runtime_error("replica 3 failed");
  }),
                    "replica 3 failed");
  // The workers survive an error and keep working.
  workers.run([&](int r) { ++calls[static_cast<std::size_t>(r)]; });
  CHECK(calls == std::vector<int>(5, 101));
}
