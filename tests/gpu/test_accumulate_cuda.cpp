// Gradient accumulation (--accumulate K) on CUDA replicas. keep_gradients and add_kept_gradients against the
// host's addition of the two gradients, to the bit; and, as on the CPU (tests/test_accumulate.cpp), one
// replica accumulating K micro-batches of B rows against K replicas on one GPU stepping on K x B rows: the
// same rows, the same scale, and the same-device sum adds the K gradients in the order add_kept_gradients
// does, so the parameters agree to the bit, under both strategies and with the step captured as graphs.
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <vector>

#include "host/cuda/cuda_communicators.hpp"
#include "host/cuda/cuda_data_parallel.hpp"
#include "host/cuda/cuda_replica.hpp"
#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "host/training/trainer.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/synthetic_data.hpp"
#include "tests/trained_run.hpp"

using namespace mnistdp;
using namespace mnistdp::gpu_test;

namespace {

using L = ParamLayout;

std::vector<float> gradients_of(Replica& replica) {
  CUDA_CHECK(cudaDeviceSynchronize());
  return to_host(replica.gradient_buffer(), L::kGradCount);
}

using Run = testing::TrainedRun;

// `replicas` CUDA replicas on device 0, batch `batch` in `accumulate` micro-batches, `steps` steps with
// momentum 0.9.
Run train(const DataSplits& data, int replicas, int batch, int accumulate, long steps, bool data_parallel,
          const CudaStepOptions& options) {
  std::vector<std::unique_ptr<Replica>> list;
  std::vector<Replica*> raw;
  for (int r = 0; r < replicas; ++r) {
    list.push_back(make_cuda_replica(data, 0, options));
    raw.push_back(list.back().get());
  }
  std::vector<float> init(L::kCount);
  init_parameters(init, 41);
  list[0]->load_parameters(init);
  TrainConfig config;
  config.epochs = 1000;
  config.max_steps = steps;
  config.batch_size = batch;
  config.accumulate = accumulate;
  config.sgd.momentum = 0.9f;
  config.seed = 41;
  config.log_interval = 1;
  config.evaluate = false;
  auto make = [&]() -> Trainer {
    if (data_parallel)
      return Trainer(std::move(list), make_cuda_data_parallel_links(raw), data.train.count, config);
    std::unique_ptr<Communicator> communicator =
        replicas == 1 ? make_host_communicator() : make_same_device_communicator(raw);
    return Trainer(std::move(list), std::move(communicator), data.train.count, config);
  };
  Trainer trainer = make();
  return testing::train_to_end(trainer);
}

}  // namespace

TEST_CASE("a CUDA replica adds the next micro-batch's gradient to the kept one as the host adds them",
          "[gpu][accumulate]") {
  const DataSplits data = testing::synthetic_splits(120, 10, 43);
  CudaStepOptions options;
  options.cuda_graphs = GENERATE(false, true);
  CAPTURE(options.cuda_graphs);
  std::unique_ptr<Replica> replica = make_cuda_replica(data, 0, options);
  std::vector<float> init(L::kCount);
  init_parameters(init, 43);
  replica->load_parameters(init);
  std::vector<std::int32_t> order(120);
  std::iota(order.begin(), order.end(), 0);
  replica->set_epoch_order(order);
  // Micro-batches of 23 and 17 rows (no tile's multiple) of a step of 40 rows.
  replica->compute_gradients(0, 23, 40);
  const std::vector<float> first = gradients_of(*replica);
  replica->compute_gradients(23, 17, 40);
  const std::vector<float> second = gradients_of(*replica);
  std::vector<float> want(L::kGradCount);
  for (std::size_t i = 0; i < want.size(); ++i)
    want[i] = first[i] + second[i];

  replica->compute_gradients(0, 23, 40);
  replica->keep_gradients();
  replica->compute_gradients(23, 17, 40);
  replica->add_kept_gradients();
  const std::vector<float> got = gradients_of(*replica);
  CHECK(bitwise_equal(got, want));
  // Three micro-batches: the kept sum moves on (the second keep replaces the first).
  replica->keep_gradients();
  replica->compute_gradients(40, 9, 40);
  const std::vector<float> third = gradients_of(*replica);  // the buffer holds the third alone here
  replica->add_kept_gradients();
  std::vector<float> want3(L::kGradCount);
  for (std::size_t i = 0; i < want3.size(); ++i)
    want3[i] = want[i] + third[i];
  CHECK(bitwise_equal(gradients_of(*replica), want3));
}

TEST_CASE("one CUDA replica accumulating K micro-batches takes K replicas' step on one GPU, to the bit",
          "[gpu][accumulate]") {
  // 480 rows: whole steps of 40 and 60 rows for K = 2 and 3, so that no step is short.
  const DataSplits data = testing::synthetic_splits(480, 10, 47);
  const int k = GENERATE(from_range(sweep({2, 3}, {3})));
  CudaStepOptions options;
  options.cuda_graphs = GENERATE(false, true);
  CAPTURE(k, options.cuda_graphs);
  const long steps = kUnderSanitizer ? 5 : 14;  // across the end of the first epoch (8 or 12 steps)
  const Run replicas = train(data, k, 20 * k, 1, steps, false, options);
  for (const bool data_parallel : {false, true}) {
    CAPTURE(data_parallel);
    const Run accumulated = train(data, 1, 20, k, steps, data_parallel, options);
    CHECK(bitwise_equal(accumulated.params, replicas.params));
    CHECK(bitwise_equal(accumulated.momentum, replicas.momentum));
    REQUIRE(accumulated.losses.size() == replicas.losses.size());
  }
  CHECK(replicas.losses.back() < replicas.losses.front());
}
