// ZeRO stage 1 (--strategy zero1, host/training/zero1.cpp) against the all-reduce, on CPU replicas. The
// reduce-scatter adds every element over the replicas in the all-reduce's order, and SGD works element by
// element, so the parameters, the momentum and the losses must be the all-reduce's to the bit, while each
// replica keeps the momentum of its own shard alone. A checkpoint's momentum is gathered from the shards,
// so a run resumes from either strategy under the other.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "host/command/strategy_table.hpp"
#include "host/cpu/cpu_replica.hpp"
#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "host/training/strategy.hpp"
#include "host/training/trace.hpp"
#include "host/training/trainer.hpp"
#include "tests/loss_recorder.hpp"
#include "tests/synthetic_data.hpp"
#include "tests/temp_dir.hpp"
#include "tests/trained_run.hpp"

using namespace mnistdp;

namespace {

using L = ParamLayout;

// 581 rows: 9 full batches of 64 and a short one of 5, so that runs cross epoch ends and a fourth replica
// gets no rows in the short batch.
constexpr int kTrainRows = 581;

using Run = testing::TrainedRun;

enum class Algorithm { allreduce, zero1 };

struct Setup {
  int replicas = 2;
  Algorithm algorithm = Algorithm::allreduce;
  int batch = 64;
  int accumulate = 1;
};

std::vector<std::unique_ptr<Replica>> cpu_replicas(const DataSplits& data, int n) {
  std::vector<std::unique_ptr<Replica>> list;
  for (int r = 0; r < n; ++r)
    list.push_back(std::make_unique<CpuReplica>(data, r));
  return list;
}

std::unique_ptr<Strategy> strategy_of(Algorithm a) {
  return a == Algorithm::zero1 ? make_zero1_strategy(make_host_communicator())
                               : make_all_reduce_strategy(make_host_communicator());
}

TrainConfig config_of(const Setup& s, long start, long end) {
  TrainConfig config;
  config.epochs = 1000;
  config.max_steps = end;
  config.start_step = start;
  config.batch_size = s.batch;
  config.accumulate = s.accumulate;
  config.sgd.lr = 0.05f;
  config.sgd.momentum = 0.9f;
  config.sgd.weight_decay = 1e-4f;
  config.seed = 7;
  config.log_interval = 1;
  config.evaluate = false;
  return config;
}

// Steps [start, end) from the given state (none: the seed's initialisation, no momentum yet), every replica
// loaded with the whole momentum as a resumed run loads it.
Run train(const DataSplits& data, const Setup& s, long start, long end, const Run* from = nullptr) {
  std::vector<std::unique_ptr<Replica>> list = cpu_replicas(data, s.replicas);
  std::vector<float> init(L::kCount);
  init_parameters(init, 7);
  list[0]->load_parameters(from ? from->params : init);
  if (from)
    for (auto& r : list)
      r->load_momentum(from->momentum);
  Trainer trainer(std::move(list), strategy_of(s.algorithm), data.train.count, config_of(s, start, end));
  return testing::train_to_end(trainer);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("ZeRO-1's parameters, momentum and losses are the all-reduce's to the bit", "[zero1][strategy]") {
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 17);
  const int replicas = GENERATE(1, 2, 3, 4);
  const int accumulate = GENERATE(1, 2);
  CAPTURE(replicas, accumulate);
  const Setup allreduce{replicas, Algorithm::allreduce, 64 / accumulate, accumulate};
  const Setup zero1{replicas, Algorithm::zero1, 64 / accumulate, accumulate};
  const Run a = train(data, allreduce, 0, 40);
  const Run z = train(data, zero1, 0, 40);
  CHECK(same_bits(z.params, a.params));
  REQUIRE_FALSE(a.momentum.empty());
  CHECK(same_bits(z.momentum, a.momentum));  // gathered from the shards: no NaN left unwritten
  CHECK(same_bits(z.losses, a.losses));
  CHECK(a.losses.back() < a.losses.front());
}

TEST_CASE("under ZeRO-1 each replica keeps the momentum of its own shard alone", "[zero1][strategy]") {
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 19);
  const int n = 3;
  std::vector<std::unique_ptr<Replica>> list = cpu_replicas(data, n);
  std::vector<Replica*> raw;
  for (auto& r : list)
    raw.push_back(r.get());
  std::vector<float> init(L::kCount);
  init_parameters(init, 7);
  list[0]->load_parameters(init);
  Trainer trainer(std::move(list), strategy_of(Algorithm::zero1), data.train.count,
                  config_of({n, Algorithm::zero1}, 0, 5));
  testing::LossRecorder recorder;
  trainer.run(recorder);
  const std::vector<Shard> shards = parameter_shards(n);
  REQUIRE(shards.size() == 3);
  CHECK(shards[0].first == 0);
  CHECK(shards[2].first + shards[2].count == static_cast<int>(L::kCount));
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    // A buffer of NaN: the replica writes its shard and nothing else.
    std::vector<float> momentum(L::kCount, std::numeric_limits<float>::quiet_NaN());
    raw[static_cast<std::size_t>(r)]->store_momentum(momentum);
    long written = 0, outside = 0;
    for (std::size_t i = 0; i < L::kCount; ++i) {
      const Shard& s = shards[static_cast<std::size_t>(r)];
      const bool mine = static_cast<int>(i) >= s.first && static_cast<int>(i) < s.first + s.count;
      if (!std::isnan(momentum[i])) (mine ? written : outside) += 1;
    }
    CHECK(written == shards[static_cast<std::size_t>(r)].count);
    CHECK(outside == 0);
    // The whole-buffer SGD step is not this replica's any more.
    CHECK_THROWS_AS(raw[static_cast<std::size_t>(r)]->sgd_step({}), std::logic_error);
    CHECK_THROWS_AS(raw[static_cast<std::size_t>(r)]->sgd_step_shard({}, 0, 10), std::logic_error);
  }
}

TEST_CASE("a run resumes from ZeRO-1 under the all-reduce and back, to the same parameters",
          "[zero1][strategy]") {
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 23);
  const Run whole = train(data, {3, Algorithm::allreduce}, 0, 30);
  const Run first_zero1 = train(data, {3, Algorithm::zero1}, 0, 12);
  const Run then_allreduce = train(data, {3, Algorithm::allreduce}, 12, 30, &first_zero1);
  CHECK(same_bits(then_allreduce.params, whole.params));
  const Run first_allreduce = train(data, {3, Algorithm::allreduce}, 0, 12);
  const Run then_zero1 = train(data, {3, Algorithm::zero1}, 12, 30, &first_allreduce);
  CHECK(same_bits(then_zero1.params, whole.params));
  REQUIRE_FALSE(whole.momentum.empty());
  CHECK(same_bits(then_zero1.momentum, whole.momentum));
  // And on two replicas after three: the shards are the run's, not the checkpoint's.
  const Run then_two = train(data, {2, Algorithm::zero1}, 12, 30, &first_zero1);
  const Run two_from_allreduce = train(data, {2, Algorithm::allreduce}, 12, 30, &first_allreduce);
  CHECK(same_bits(then_two.params, two_from_allreduce.params));
}

TEST_CASE("ZeRO-1's trace: the replicas' phases, and its collectives once a step in a row of their own",
          "[zero1][strategy][trace]") {
  const DataSplits data = testing::synthetic_splits(200, 10, 29);
  const Setup s{2, Algorithm::zero1, 16, 2};
  TrainConfig config = config_of(s, 0, 3);
  config.trace_steps = 3;
  std::vector<std::unique_ptr<Replica>> list = cpu_replicas(data, 2);
  std::vector<float> init(L::kCount);
  init_parameters(init, 7);
  list[0]->load_parameters(init);
  Trainer trainer(std::move(list), strategy_of(Algorithm::zero1), data.train.count, config);
  testing::LossRecorder recorder;
  trainer.run(recorder);
  const std::vector<int> micro = trainer.traced_micro_batches();
  CHECK(micro == std::vector<int>{2, 2, 2});
  const std::vector<std::vector<StepMarks>> marks = trainer.take_trace();
  const std::vector<LinkStepMarks> collectives = trainer.take_link_trace();
  REQUIRE(collectives.size() == 6);  // one entry a micro-batch, the last of each step's filled
  for (std::size_t k = 0; k < collectives.size(); ++k) {
    CAPTURE(k);
    const LinkStepMarks& m = collectives[k];
    const auto at = [&](LinkMark mark) { return m[static_cast<std::size_t>(mark)]; };
    if (k % 2 == 0) {
      CHECK(at(LinkMark::reduce) == 0.0);
    } else {
      CHECK(at(LinkMark::reduce) > 0.0);
      CHECK(at(LinkMark::reduce) <= at(LinkMark::reduce_end));
      CHECK(at(LinkMark::reduce_end) <= at(LinkMark::broadcast));
      CHECK(at(LinkMark::broadcast) <= at(LinkMark::broadcast_end));
    }
  }
  const test::TempDir dir;
  const std::filesystem::path path = dir.path() / "trace.json";
  const TraceRun run{2, 1, 16, 2, data.train.count};
  write_chrome_trace(path, marks, {"cpu:0", "cpu:1"}, 0, trainer.strategy().trace_phases(), collectives,
                     micro, &run);
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  CHECK(trace["mnist_dp"]["strategy"] == "zero1");
  std::map<std::string, int> spans;
  double earliest = 1e300;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["tid"] == 2) CHECK(e["args"]["name"] == "the collectives (ZeRO-1)");
    if (e["ph"] != "X") continue;
    ++spans[e["name"].get<std::string>()];
    earliest = std::min(earliest, e["ts"].get<double>());
  }
  CHECK(earliest >= 0.0);                                    // the empty entries set no origin
  CHECK(spans["gather"] == 12);                              // 2 replicas, 6 micro-batches
  CHECK(spans["reduce-scatter (and waiting for it)"] == 6);  // 2 replicas, once a step
  CHECK(spans["sgd on its shard"] == 6);
  CHECK(spans["reduce-scatter gradients"] == 3);
  CHECK(spans["all-gather parameters"] == 3);
}

TEST_CASE("ZeRO-1 is refused where its collectives do not exist", "[zero1][strategy]") {
  const DataSplits data = testing::synthetic_splits(70, 10, 5);
  std::vector<std::unique_ptr<Replica>> replicas = cpu_replicas(data, 2);
  Placement placement;
  placement.replicas = 2;
  placement.gpu = true;
  placement.replica_devices = {0, 1};
  CHECK_THROWS_WITH(strategy_entry("zero1").make({placement, replicas, nullptr, std::chrono::seconds(1)}),
                    Catch::Contains("the replicas of one GPU"));
  CHECK_FALSE(strategy_entry("zero1").across_gpus);
  // A communicator without the two halves says so at the first step, naming itself.
  class NoHalves final : public Communicator {
   public:
    std::string description() const override { return "a sum without halves"; }
    void all_reduce_gradients(std::span<Replica* const>) override {}
  };
  std::vector<std::unique_ptr<Replica>> list = cpu_replicas(data, 2);
  std::vector<float> init(L::kCount);
  init_parameters(init, 7);
  list[0]->load_parameters(init);
  Trainer trainer(std::move(list), make_zero1_strategy(std::make_unique<NoHalves>()), data.train.count,
                  config_of({2, Algorithm::zero1}, 0, 1));
  testing::LossRecorder recorder;
  CHECK_THROWS_WITH(trainer.run(recorder), Catch::Contains("a sum without halves: no reduce-scatter"));
}
