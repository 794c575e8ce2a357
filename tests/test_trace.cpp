#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "host/cpu/cpu_replica.hpp"
#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "host/training/trace.hpp"
#include "host/training/trainer.hpp"
#include "tests/synthetic_data.hpp"
#include "tests/temp_dir.hpp"

using namespace mnistdp;

TEST_CASE("the timeline holds every phase of every traced step of every replica, in order", "[trace]") {
  const DataSplits data = testing::synthetic_splits(1000, 10, 2);
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int r = 0; r < 3; ++r)
    replicas.push_back(std::make_unique<CpuReplica>(data, r));
  std::vector<float> init(ParamLayout::kCount);
  init_parameters(init, 0);
  replicas[0]->load_parameters(init);
  TrainConfig config;
  config.epochs = 1;
  config.max_steps = 12;
  config.trace_steps = 5;
  config.evaluate = false;
  Trainer trainer(std::move(replicas), make_host_communicator(), data.train.count, config);
  TrainListener quiet;
  trainer.run(quiet);
  const auto marks = trainer.take_trace();
  REQUIRE(marks.size() == 3);
  for (const auto& steps : marks) {
    REQUIRE(steps.size() == 5);
    for (const StepMarks& m : steps)
      for (int i = 1; i < kMarksPerStep; ++i)
        CHECK(m[i] >= m[i - 1]);
  }

  test::TempDir dir;
  const auto path = dir.path() / "trace.json";
  write_chrome_trace(path, marks, {"cpu:0", "cpu:1", "cpu:2"}, 100);
  std::ifstream file(path);
  const nlohmann::json trace = nlohmann::json::parse(file);  // throws if the file is not valid JSON
  std::map<std::string, int> phases;
  std::set<long> steps;
  int rows = 0;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M") {
      ++rows;
      continue;
    }
    CHECK(e.at("ph") == "X");
    CHECK(e.at("dur").get<double>() >= 0.0);
    CHECK(e.at("ts").get<double>() >= 0.0);
    ++phases[e.at("name").get<std::string>()];
    steps.insert(e.at("args").at("step").get<long>());
  }
  // Numbered from the first traced step in all (a resumed run's), not from 0.
  CHECK(steps == std::set<long>{100, 101, 102, 103, 104});
  CHECK(rows == 3);
  for (const char* phase : {"gather", "forward", "loss", "backward", "all-reduce", "sgd"})
    CHECK(phases[phase] == 15);
  CHECK(phases.size() == 6);
}
