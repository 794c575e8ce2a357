// The NCCL communicator of multi-process runs (make_nccl_rank_communicator), on one GPU: a world of one rank
// goes through everything a rank of a larger world does (the unique id through the process group, the
// non-blocking ncclCommInitRankConfig polled to completion, an all-reduce per step, await_completion polling
// the stream and NCCL's error state, finalize and destroy), and its all-reduce of one rank changes nothing,
// so the run must equal the one-replica run to the bit.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "host/cuda/cuda_communicators.hpp"
#include "host/cuda/cuda_replica.hpp"
#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "host/processes/process_group.hpp"
#include "host/training/communicator.hpp"
#include "host/training/trainer.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/scoped_env.hpp"
#include "tests/synthetic_data.hpp"

using namespace mnistdp;
using namespace mnistdp::gpu_test;

namespace {

using L = ParamLayout;

// Full batches an epoch: 9, and under a sanitizer 2 (each epoch still ends in its short batch of 13 rows).
constexpr int kFullBatches = kUnderSanitizer ? 2 : 9;
constexpr std::size_t kSteps = 2 * (kFullBatches + 1);
constexpr int kTrainRows = kFullBatches * 64 + 13;

// A world of one process: every collective leaves its argument as it is.
class SoloProcessGroup final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string description() const override { return "one process"; }
  void all_reduce_sum(std::span<float>) override {}
  bool any(bool flag) override { return flag; }
  void broadcast(std::span<std::byte>) override { ++broadcasts; }
  void abort(int, const std::string&) noexcept override {}

  int broadcasts = 0;
};

class LossRecorder final : public TrainListener {
 public:
  void on_step_loss(const StepLoss& s) override { losses.push_back(s.loss); }
  std::vector<float> losses;
};

struct Run {
  std::vector<float> params;
  std::vector<float> losses;
};

// Two epochs of kFullBatches full batches and a short one, momentum 0.9, through the given communicator
// (null: none, the one-replica reference).
Run train(const DataSplits& data, bool through_rank_communicator,
          std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  std::vector<std::unique_ptr<Replica>> replicas;
  replicas.push_back(make_cuda_replica(data, 0, {GemmImpl::blocked}));
  std::vector<float> init(L::kCount);
  init_parameters(init, 7);
  replicas[0]->load_parameters(init);
  SoloProcessGroup group;
  std::unique_ptr<Communicator> communicator = through_rank_communicator
                                                   ? make_nccl_rank_communicator(*replicas[0], group, timeout)
                                                   : make_host_communicator();
  if (through_rank_communicator) {
    CHECK(group.broadcasts == 1);  // the unique id
    CHECK(communicator->description().find("rank 0 of 1") != std::string::npos);
  }
  TrainConfig config;
  config.epochs = 2;
  config.batch_size = 64;
  config.sgd.lr = 0.05f;
  config.sgd.momentum = 0.9f;
  config.seed = 7;
  config.log_interval = 1;
  config.evaluate = false;
  Trainer trainer(std::move(replicas), std::move(communicator), data.train.count, config);
  LossRecorder recorder;
  trainer.run(recorder);
  Run run;
  run.losses = recorder.losses;
  run.params.resize(L::kCount);
  trainer.replicas()[0]->store_parameters(run.params);
  return run;
}

}  // namespace

TEST_CASE("the multi-process NCCL communicator, world of one: the one-replica run to the bit",
          "[gpu][nccl]") {
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 31);
  const Run reference = train(data, false);
  const Run ranked = train(data, true);
  REQUIRE(reference.losses.size() == kSteps);
  CHECK(bitwise_equal(ranked.losses, reference.losses));
  CHECK(bitwise_equal(ranked.params, reference.params));
}

TEST_CASE("the multi-process NCCL communicator refuses what it cannot serve", "[gpu][nccl]") {
  const DataSplits data = testing::synthetic_splits(100, 10, 5);
  auto a = make_cuda_replica(data, 0, {GemmImpl::blocked});
  auto b = make_cuda_replica(data, 0, {GemmImpl::blocked});
  SoloProcessGroup group;
  const auto communicator = make_nccl_rank_communicator(*a, group, std::chrono::seconds(60));
  const std::vector<Replica*> other{b.get()};
  CHECK_THROWS_AS(communicator->all_reduce_gradients(other), std::logic_error);
  const std::vector<Replica*> two{a.get(), b.get()};
  CHECK_THROWS_AS(communicator->all_reduce_gradients(two), std::logic_error);
  communicator->await_completion();  // nothing issued: returns at once
}

#ifdef MNISTDP_CUDA_EMULATED
namespace {

using testing::ScopedEnv;

}  // namespace

// The emulated NCCL keeps each call of the communicator's non-blocking mode in progress for a seeded number
// of polls, and posts an all-reduce on its stream only at the poll that completes it: the polling protocol
// runs, and what it orders shows in the bits.
TEST_CASE(
    "the multi-process NCCL communicator polled through ncclInProgress gives the bits of calls done at once",
    "[gpu][nccl]") {
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 31);
  Run at_once;
  {
    const ScopedEnv polls("MNISTDP_EMU_NCCL_POLLS", "0");
    at_once = train(data, true);
  }
  Run polled;
  {
    const ScopedEnv polls("MNISTDP_EMU_NCCL_POLLS", "7");
    polled = train(data, true);
  }
  REQUIRE(at_once.losses.size() == kSteps);
  CHECK(bitwise_equal(polled.losses, at_once.losses));
  CHECK(bitwise_equal(polled.params, at_once.params));
}

// A failure planted in the emulated NCCL (an all-reduce's or the init's, an error or a hang) is reported by
// the communicator with NCCL's error and the rank, through its polling or its timeout, and the run ends: the
// communicator aborted, the held all-reduce ended, the stream drained.
TEST_CASE("the multi-process NCCL communicator reports a failure of NCCL's and ends cleanly", "[gpu][nccl]") {
  const DataSplits data = testing::synthetic_splits(3 * 64, 10, 31);
  struct Case {
    const char* polls;
    const char* fail;
    std::vector<std::string> message;
    std::chrono::milliseconds timeout = std::chrono::seconds(60);
  };
  const std::vector<Case> cases{
      // Polled in all_reduce_gradients' wait for the call.
      {"3",
       "ncclAllReduce:2:ncclRemoteError",
       {"rank 0 of 1", "ncclAllReduce failed", "remote process exited or there was a network error",
        "ncclAllReduce #2 on rank 0 ended with ncclRemoteError"}},
      // Completed within the call: the error arrives while await_completion polls.
      {"0",
       "ncclAllReduce:3:ncclSystemError",
       {"rank 0 of 1", "asynchronous error", "unhandled system error",
        "ncclAllReduce #3 on rank 0 ended with ncclSystemError"}},
      {"2",
       "ncclCommInitRankConfig:1:ncclInternalError",
       {"rank 0 of 1", "ncclCommInitRankConfig (every rank must reach it) failed", "internal error"}},
      // A peer that never answers: the timeouts.
      {"1",
       "ncclAllReduce:1:hang",
       {"rank 0 of 1", "the all-reduce did not finish within 0.2 s"},
       std::chrono::milliseconds(200)},
      {"1",
       "ncclCommInitRankConfig:1:hang",
       {"rank 0 of 1", "ncclCommInitRankConfig", "did not complete within 0.2 s"},
       std::chrono::milliseconds(200)},
  };
  for (const Case& c : cases) {
    CAPTURE(c.fail, c.polls);
    const ScopedEnv polls("MNISTDP_EMU_NCCL_POLLS", c.polls);
    const ScopedEnv fail("MNISTDP_EMU_NCCL_FAIL", c.fail);
    std::string message;
    try {
      static_cast<void>(train(data, true, c.timeout));
    } catch (const CudaError& e) {
      message = e.what();
    }
    CAPTURE(message);
    for (const std::string& part : c.message)
      CHECK_THAT(message, Catch::Matchers::Contains(part));
    // Nothing of the failed run is left on the device.
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
  }
  // A finalize that fails: the destructor aborts instead of destroying, and the run itself stands.
  const ScopedEnv fail("MNISTDP_EMU_NCCL_FAIL", "ncclCommFinalize:1:ncclRemoteError");
  const Run run = train(data, true);
  CHECK(run.losses.size() == 6);
}
#endif
