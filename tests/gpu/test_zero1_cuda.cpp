// ZeRO stage 1 (--strategy zero1) on the CUDA replicas of one GPU, against the all-reduce there: the
// same-device communicator's reduce-scatter adds every element in replica order, as its all-reduce does, and
// the SGD kernel works element by element on each shard, so the parameters and the momentum agree to the bit;
// each replica's momentum buffer holds its shard alone.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "host/cuda/cuda_communicators.hpp"
#include "host/cuda/cuda_replica.hpp"
#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "host/training/strategy.hpp"
#include "host/training/trainer.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/synthetic_data.hpp"
#include "tests/trained_run.hpp"

using namespace mnistdp;
using namespace mnistdp::gpu_test;

namespace {

using L = ParamLayout;

struct Run {
  testing::TrainedRun trained;
  std::vector<std::vector<float>> replica_momentum;  // each replica's store_momentum into a buffer of NaN
};

Run train(const DataSplits& data, int replicas, bool zero1, long steps) {
  std::vector<std::unique_ptr<Replica>> list;
  std::vector<Replica*> raw;
  for (int r = 0; r < replicas; ++r) {
    list.push_back(make_cuda_replica(data, 0, {GemmImpl::blocked}));
    raw.push_back(list.back().get());
  }
  std::vector<float> init(L::kCount);
  init_parameters(init, 53);
  list[0]->load_parameters(init);
  TrainConfig config;
  config.epochs = 1000;
  config.max_steps = steps;
  config.sgd.momentum = 0.9f;
  config.sgd.weight_decay = 1e-4f;
  config.seed = 53;
  config.log_interval = 1;
  config.evaluate = false;
  std::unique_ptr<Communicator> communicator =
      replicas == 1 ? make_host_communicator() : make_same_device_communicator(raw);
  std::unique_ptr<Strategy> strategy = zero1 ? make_zero1_strategy(std::move(communicator))
                                             : make_all_reduce_strategy(std::move(communicator));
  Trainer trainer(std::move(list), std::move(strategy), data.train.count, config);
  Run run{testing::train_to_end(trainer), {}};
  REQUIRE_FALSE(run.trained.momentum.empty());
  for (Replica* r : raw) {
    run.replica_momentum.emplace_back(L::kCount, std::numeric_limits<float>::quiet_NaN());
    r->store_momentum(run.replica_momentum.back());
  }
  return run;
}

long finite(const std::vector<float>& v) {
  long n = 0;
  for (float x : v)
    n += std::isfinite(x) ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("ZeRO-1 on the replicas of one GPU gives the all-reduce's parameters and momentum to the bit",
          "[gpu][zero1]") {
  // 581 rows: an epoch of 9 batches of 64 and one of 5, so that a third replica gets no rows there.
  const DataSplits data = testing::synthetic_splits(581, 10, 59);
  const int replicas = GENERATE(from_range(sweep({1, 2, 3}, {3})));
  CAPTURE(replicas);
  const long steps = kUnderSanitizer ? 11 : 14;  // across the end of the first epoch
  const Run allreduce = train(data, replicas, false, steps);
  const Run zero1 = train(data, replicas, true, steps);
  CHECK(bitwise_equal(zero1.trained.params, allreduce.trained.params));
  CHECK(bitwise_equal(zero1.trained.momentum, allreduce.trained.momentum));  // gathered: no NaN left
  CHECK(bitwise_equal(zero1.trained.losses, allreduce.trained.losses));
  // Each replica's momentum: its shard alone under ZeRO-1, the whole buffer under the all-reduce.
  const std::vector<Shard> shards = parameter_shards(replicas);
  for (int r = 0; r < replicas; ++r) {
    CAPTURE(r);
    CHECK(finite(zero1.replica_momentum[static_cast<std::size_t>(r)]) ==
          shards[static_cast<std::size_t>(r)].count);
    CHECK(finite(allreduce.replica_momentum[static_cast<std::size_t>(r)]) == static_cast<long>(L::kCount));
  }
  CHECK(allreduce.trained.losses.back() < allreduce.trained.losses.front());
}
