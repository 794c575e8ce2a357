// nn.DataParallel's algorithm (--strategy dataparallel, host/training/data_parallel.hpp) against the
// all-reduce, on CPU replicas. Each row's d(logits) is the same computation under both (ref::softmax_xent_row
// with the same scale), and device 0 adds the replicas' gradients in the order the host communicator does,
// so the parameters and the momentum must agree to the bit. The loss sum is added differently: the
// all-reduce rounds each shard's (double) sum to float and adds the n floats; DataParallel rounds the whole
// batch's double sum once. Each of those n roundings is within half an ulp of a value at most the total, so
// the two differ by at most n ulps of the loss: a relative n * 2^-23.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "host/cpu/cpu_replica.hpp"
#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "host/training/data_parallel.hpp"
#include "host/training/trainer.hpp"
#include "tests/synthetic_data.hpp"
#include "tests/trained_run.hpp"

using namespace mnistdp;

namespace {

using L = ParamLayout;

// 581 rows: 9 full batches of 64 and a short one of 5, so that 100 steps cross ten epoch ends and the short
// batch leaves a fourth replica without rows.
constexpr int kTrainRows = 581;
constexpr long kSteps = 100;

using Run = testing::TrainedRun;

enum class Algorithm { allreduce, dataparallel };

// `replicas` CPU replicas for steps [start, end) from the given parameters and momentum (none: from the
// seed's initialisation, no momentum yet).
Run train(const DataSplits& data, int replicas, Algorithm strategy, long start, long end,
          const Run* from = nullptr) {
  std::vector<std::unique_ptr<Replica>> list;
  std::vector<Replica*> raw;
  for (int r = 0; r < replicas; ++r) {
    list.push_back(std::make_unique<CpuReplica>(data, r));
    raw.push_back(list.back().get());
  }
  std::vector<float> init(L::kCount);
  init_parameters(init, 11);
  list[0]->load_parameters(from ? from->params : init);
  if (from)
    for (auto& r : list)
      r->load_momentum(from->momentum);
  TrainConfig config;
  config.epochs = 1000;
  config.max_steps = end;
  config.start_step = start;
  config.sgd.momentum = 0.9f;
  config.seed = 11;
  config.log_interval = 1;
  config.evaluate = false;
  auto make = [&]() -> Trainer {
    if (strategy == Algorithm::dataparallel)
      return Trainer(std::move(list), make_host_data_parallel_links(raw), data.train.count, config);
    return Trainer(std::move(list), make_host_communicator(), data.train.count, config);
  };
  Trainer trainer = make();
  return testing::train_to_end(trainer);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("DataParallel's step gives the all-reduce's parameters to the bit, and its losses within n ulps",
          "[data_parallel][strategy]") {
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 17);
  const int replicas = GENERATE(1, 2, 3, 4);
  CAPTURE(replicas);
  const Run allreduce = train(data, replicas, Algorithm::allreduce, 0, kSteps);
  const Run dataparallel = train(data, replicas, Algorithm::dataparallel, 0, kSteps);
  CHECK(same_bits(dataparallel.params, allreduce.params));
  CHECK(same_bits(dataparallel.momentum, allreduce.momentum));
  REQUIRE(dataparallel.losses.size() == static_cast<std::size_t>(kSteps));
  REQUIRE(allreduce.losses.size() == dataparallel.losses.size());
  const float bound = static_cast<float>(replicas) * std::ldexp(1.0f, -23);
  for (std::size_t s = 0; s < allreduce.losses.size(); ++s) {
    CAPTURE(s, allreduce.losses[s], dataparallel.losses[s]);
    CHECK(std::fabs(dataparallel.losses[s] - allreduce.losses[s]) <= bound * std::fabs(allreduce.losses[s]));
    if (replicas == 1) CHECK(dataparallel.losses[s] == allreduce.losses[s]);  // one shard: the same sum
  }
  // It trained: the comparison is not one of two flat lines.
  CHECK(allreduce.losses.back() < allreduce.losses.front());
}

TEST_CASE("a run of either strategy resumes under the other to the same parameters",
          "[data_parallel][strategy]") {
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 19);
  const Run whole = train(data, 3, Algorithm::allreduce, 0, 60);
  const Run first_dp = train(data, 3, Algorithm::dataparallel, 0, 25);
  const Run then_allreduce = train(data, 3, Algorithm::allreduce, 25, 60, &first_dp);
  CHECK(same_bits(then_allreduce.params, whole.params));
  const Run first_allreduce = train(data, 3, Algorithm::allreduce, 0, 25);
  const Run then_dp = train(data, 3, Algorithm::dataparallel, 25, 60, &first_allreduce);
  CHECK(same_bits(then_dp.params, whole.params));
  CHECK(same_bits(then_dp.momentum, whole.momentum));
}

TEST_CASE(
    "DataParallel's timeline: every replica's phases in order, and device 0's copies in a row of their own",
    "[data_parallel][strategy][trace]") {
  const DataSplits data = testing::synthetic_splits(200, 10, 29);
  std::vector<std::unique_ptr<Replica>> list;
  std::vector<Replica*> raw;
  for (int r = 0; r < 3; ++r) {
    list.push_back(std::make_unique<CpuReplica>(data, r));
    raw.push_back(list.back().get());
  }
  std::vector<float> init(L::kCount);
  init_parameters(init, 5);
  list[0]->load_parameters(init);
  TrainConfig config;
  config.epochs = 2;  // 4 steps an epoch, the last of 8 rows (3, 3 and 2 to the replicas)
  config.evaluate = false;
  config.trace_steps = 6;
  Trainer trainer(std::move(list), make_host_data_parallel_links(raw), data.train.count, config);
  TrainListener quiet;
  trainer.run(quiet);
  const auto marks = trainer.take_trace();
  REQUIRE(marks.size() == 3);
  for (std::size_t r = 0; r < marks.size(); ++r) {
    CAPTURE(r);
    REQUIRE(marks[r].size() == 6);  // every step closed, the replicas that take no SGD step included
    for (const StepMarks& m : marks[r])
      for (std::size_t i = 1; i < m.size(); ++i)
        CHECK(m[i] >= m[i - 1]);
  }
  const std::vector<LinkStepMarks> links = trainer.take_link_trace();
  REQUIRE(links.size() == 6);
  for (std::size_t k = 0; k < links.size(); ++k) {
    CAPTURE(k);
    for (std::size_t i = 1; i < links[k].size(); ++i)
      CHECK(links[k][i] >= links[k][i - 1]);
    // Device 0 takes the loss once every replica has handed its logits over, and reduces once every
    // backward pass is done.
    for (std::size_t r = 0; r < marks.size(); ++r) {
      CHECK(links[k][static_cast<std::size_t>(LinkMark::loss)] >=
            marks[r][k][static_cast<std::size_t>(Mark::loss)]);
      CHECK(links[k][static_cast<std::size_t>(LinkMark::reduce)] >=
            marks[r][k][static_cast<std::size_t>(Mark::backward_end)]);
    }
  }
}

TEST_CASE(
    "DataParallel's trainer refuses the replicas' agreement check, and its links a device replica's "
    "absence of pieces",
    "[data_parallel][strategy]") {
  const DataSplits data = testing::synthetic_splits(100, 10, 23);
  std::vector<std::unique_ptr<Replica>> list;
  list.push_back(std::make_unique<CpuReplica>(data, 0));
  std::vector<Replica*> raw{list[0].get()};
  TrainConfig config;
  config.check_replicas = 1;
  CHECK_THROWS_AS(Trainer(std::move(list), make_host_data_parallel_links(raw), data.train.count, config),
                  std::invalid_argument);
  CHECK_THROWS_AS(make_host_data_parallel_links({}), std::invalid_argument);
}
