// The table of ways of launching a step (host/cuda/step_launch.hpp) and what every row must give: the plain
// way's parameters to the bit, for a lone replica whose steps the trainer hands it whole, traced or not.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "host/cuda/cuda_replica.hpp"
#include "host/cuda/step_launch.hpp"
#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "host/training/communicator.hpp"
#include "host/training/trainer.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/synthetic_data.hpp"

using namespace mnistdp;
using namespace mnistdp::gpu_test;

namespace {

using L = ParamLayout;

// Options that choose `way`, as the command line sets them (a switch, so that a new way must be given one).
CudaStepOptions options_for(StepLaunchWay way) {
  CudaStepOptions o{GemmImpl::slab};
  o.alone = true;
  switch (way) {
    case StepLaunchWay::plain:
      break;
    case StepLaunchWay::graph_per_step:
      o.cuda_graphs = true;
      break;
    case StepLaunchWay::multi_step_graph:
      o.cuda_graphs = true;
      o.steps_per_graph = 3;
      break;
    case StepLaunchWay::persistent:
      o.cuda_graphs = o.fused_head = o.fused_step = o.persistent = true;
      o.steps_per_graph = 3;
      break;
  }
  return o;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct LoneRun {
  std::vector<float> params;
  std::vector<std::vector<StepMarks>> trace;
  long whole_steps = 0;  // steps the way ran as graphs or in the persistent kernel
  long fused_head_steps = 0;
  long fused_steps = 0;
};

// A lone replica trained by the Trainer, momentum 0.9: 5 epochs of 3 full batches and a short one of 8 rows.
LoneRun train_alone(const CudaStepOptions& options, long trace_steps) {
  const DataSplits data = testing::synthetic_splits(200, 10, 113);
  std::vector<std::unique_ptr<Replica>> replicas;
  replicas.push_back(make_cuda_replica(data, 0, options));
  std::vector<float> init(L::kCount);
  init_parameters(init, 7);
  replicas[0]->load_parameters(init);
  TrainConfig config;
  config.epochs = 5;
  config.batch_size = 64;
  config.sgd.momentum = 0.9f;
  config.log_interval = 0;
  config.evaluate = false;
  config.trace_steps = trace_steps;
  Trainer trainer(std::move(replicas), make_host_communicator(), data.train.count, config);
  TrainListener quiet;
  trainer.run(quiet);
  LoneRun run;
  run.trace = trainer.take_trace();
  auto& replica = dynamic_cast<CudaReplica&>(*trainer.replicas()[0]);
  run.params.assign(L::kCount, std::numeric_limits<float>::quiet_NaN());
  replica.store_parameters(run.params);
  const StepGraphCounts c = replica.graph_counts();
  run.whole_steps = c.replayed + c.plain + replica.persistent_launches();
  run.fused_head_steps = replica.fused_head_steps();
  run.fused_steps = replica.fused_steps();
  return run;
}

}  // namespace

TEST_CASE("every way of launching a step has one row: a unique name, its file, options that choose it",
          "[gpu][step_launch]") {
  const std::filesystem::path root(MNISTDP_SOURCE_DIR);
  const std::string architecture = read_text(root / "docs/architecture.md");
  std::set<std::string> names;
  for (const StepLaunchEntry& v : kStepLaunchWays) {
    CAPTURE(v.name);
    CHECK(names.insert(v.name).second);
    CHECK(std::filesystem::exists(root / "host/cuda" / v.source));
    CHECK(step_launch_way(options_for(v.way)) == v.way);
    // The documentation's table of ways names each, with its file.
    CHECK(architecture.find(std::string("| ") + v.name + " |") != std::string::npos);
    CHECK(architecture.find(std::string("(../host/cuda/") + v.source + ")") != std::string::npos);
  }
}

TEST_CASE("every way of launching a step gives a lone replica the plain way's parameters",
          "[gpu][step_launch]") {
  const LoneRun plain = train_alone(options_for(StepLaunchWay::plain), 0);
  CHECK(plain.whole_steps == 0);
  for (const StepLaunchEntry& v : kStepLaunchWays) {
    if (v.way == StepLaunchWay::plain) continue;
    CAPTURE(v.name);
    const LoneRun fast = train_alone(options_for(v.way), 0);
    CHECK(fast.whole_steps > 0);  // it ran its way
    CHECK(bitwise_equal(fast.params, plain.params));
    // Traced steps (the first 6) run the plain way with their marks, in order; the others the way's own.
    const LoneRun traced = train_alone(options_for(v.way), 6);
    CHECK(bitwise_equal(traced.params, plain.params));
    REQUIRE(traced.trace.size() == 1);
    REQUIRE(traced.trace[0].size() == 6);
    for (const StepMarks& m : traced.trace[0])
      for (int i = 1; i < kMarksPerStep; ++i)
        CHECK(m[i] >= m[i - 1]);
    CHECK(traced.whole_steps > 0);
  }
}

TEST_CASE(
    "the fused paths take the hidden layer's activation: fused head, fused step and persistent kernel "
    "give the plain way's parameters",
    "[gpu][step_launch]") {
  // Every activation of the table; under a sanitizer those other than the default, which the fast paths'
  // own tests train at length.
  for (const ActivationRow& row : kActivations) {
    if (kUnderSanitizer && row.id == kDefaultActivation) continue;
    CAPTURE(row.name);
    auto with_activation_of_row = [&](CudaStepOptions o) {
      o.activation = row.id;
      return o;
    };
    const LoneRun plain = train_alone(with_activation_of_row(options_for(StepLaunchWay::plain)), 0);
    CudaStepOptions head = with_activation_of_row(options_for(StepLaunchWay::graph_per_step));
    head.fused_head = true;
    const LoneRun fused_head = train_alone(head, 0);
    CHECK(fused_head.fused_head_steps > 0);
    CHECK(bitwise_equal(fused_head.params, plain.params));
    CudaStepOptions step = head;
    step.fused_step = step.programmatic_launch = true;
    const LoneRun fused_step = train_alone(step, 0);
    CHECK(fused_step.fused_steps > 0);
    CHECK(bitwise_equal(fused_step.params, plain.params));
    const LoneRun persistent = train_alone(with_activation_of_row(options_for(StepLaunchWay::persistent)), 0);
    CHECK(persistent.whole_steps > 0);
    CHECK(bitwise_equal(persistent.params, plain.params));
  }
}
