#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "host/cuda/cuda_replica.hpp"
#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "host/training/communicator.hpp"
#include "host/training/trainer.hpp"
#include "tests/synthetic_data.hpp"

using namespace mnistdp;

TEST_CASE("a CUDA replica's timeline marks every traced step in order", "[gpu][trace]") {
  const DataSplits data = testing::synthetic_splits(500, 10, 2);
  std::vector<std::unique_ptr<Replica>> replicas;
  replicas.push_back(make_cuda_replica(data, 0, {GemmImpl::blocked}));
  std::vector<float> init(ParamLayout::kCount);
  init_parameters(init, 0);
  replicas[0]->load_parameters(init);
  TrainConfig config;
  config.epochs = 1;
  config.max_steps = 6;
  config.trace_steps = 4;
  config.evaluate = false;
  Trainer trainer(std::move(replicas), make_host_communicator(), data.train.count, config);
  TrainListener quiet;
  trainer.run(quiet);
  const auto marks = trainer.take_trace();
  REQUIRE(marks.size() == 1);
  REQUIRE(marks[0].size() == 4);
  for (std::size_t k = 0; k < marks[0].size(); ++k) {
    const StepMarks& m = marks[0][k];
    for (int i = 1; i < kMarksPerStep; ++i)
      CHECK(m[i] >= m[i - 1]);
    if (k > 0) CHECK(m[0] >= marks[0][k - 1][kMarksPerStep - 1]);
    CHECK(m[kMarksPerStep - 1] > m[0]);  // a step takes time
  }
}
