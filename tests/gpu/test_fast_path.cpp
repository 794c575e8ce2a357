// The fast path's options against the plain path, launch by launch: steps replayed as CUDA graphs
// (CudaStepOptions::cuda_graphs) and the fused classifier head (CudaStepOptions::fused_head), alone and
// together.
//
// The graph replays exactly the plain path's kernels, with the same grids and arguments; only the gather
// reads its row offset from a device counter instead of from its arguments, and the offset is the same. Every
// hand-written kernel is deterministic (docs/kernels.md, Determinism), and an all-reduce over one rank leaves
// the buffer as it is, so the two paths must agree to the bit, not within a tolerance: any difference means
// that a replay read the wrong rows, a stale buffer or the wrong settings. cuBLAS may pick another algorithm
// while a stream is being captured, so for it the comparison is the normwise 1e-5 of the other GPU tests.
// The fused head sums every element in the order of the hand-written GEMMs
// (kernels/cuda/fused/classifier_head.hpp), so it too must agree to the bit with them. With cuBLAS, whose
// products the fused kernels replace, the two runs sum in two orders, and two correct orders drift apart
// over tens of steps of training, on a GPU as on emulated devices: such a run is held to the drift of a
// control (check_drift).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "host/cuda/cuda_communicators.hpp"
#include "host/cuda/cuda_replica.hpp"
#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "host/training/communicator.hpp"
#include "host/training/trainer.hpp"
#include "kernels/cuda/fused/persistent_step.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/loss_recorder.hpp"
#include "tests/synthetic_data.hpp"

using namespace mnistdp;
using namespace mnistdp::gpu_test;

namespace {

using L = ParamLayout;

constexpr int kBatch = 64;
constexpr std::uint64_t kSeed = 5;
// 8 full batches and a short one of 40 rows: an epoch is 9 steps, so the 40 steps cross four epoch ends,
// each with its short batch, and start each new epoch at an offset the device counter must be reset to; a
// queue of 7 steps fills before the epoch's end cuts it. Under a sanitizer, 2 full batches and the short
// one, and 9 steps: three epochs, in which each shape is warmed up, captured and replayed.
constexpr int kFullBatches = kUnderSanitizer ? 2 : 8;
constexpr long kSteps = kUnderSanitizer ? 9 : 40;
constexpr int kTrainRows = kFullBatches * kBatch + 40;

enum class Reduce { host, nccl, same_device };

using testing::LossRecorder;

struct Run {
  std::vector<std::vector<float>> params;    // [replicas][kCount]
  std::vector<std::vector<float>> momentum;  // [replicas][kCount]
  std::vector<float> losses;                 // [steps] when observed
  long steps = 0;
  std::vector<CudaReplica::GraphCounts> counts;  // [replicas]
  std::vector<long> fused_head_steps;            // [replicas]
  std::vector<long> fused_steps;                 // [replicas]
  std::vector<long> persistent_steps;            // [replicas]
  std::vector<long> persistent_launches;         // [replicas]
};

// `replicas` replicas on device 0 trained by the Trainer for kSteps steps, with or without step graphs. Every
// replica's gradient buffer is poisoned (NaN) before the first step: a graph that failed to write part of
// it would carry the NaN into the parameters. observe: the loss of every step (the host then waits for the
// device after every step); otherwise the host never waits until the run is over, and the replays run as
// far ahead of the host as they can.
Run train(const DataSplits& data, const CudaStepOptions& options, int replicas, Reduce reduce, bool observe,
          int batch = kBatch, float momentum = 0.9f) {
  // A lone replica through NCCL is made as the command line makes one, alone: the trainer hands it whole
  // steps (Replica::step_alone). Through the host communicator it is not, and takes its steps in two calls
  // as each of several replicas does: the gradient graphs, tested alone.
  CudaStepOptions step = options;
  step.alone = replicas == 1 && reduce == Reduce::nccl;
  std::vector<std::unique_ptr<Replica>> owned;
  std::vector<Replica*> raw;
  for (int r = 0; r < replicas; ++r) {
    owned.push_back(make_cuda_replica(data, 0, step));
    raw.push_back(owned.back().get());
  }
  std::vector<float> init(L::kCount);
  init_parameters(init, kSeed);
  owned[0]->load_parameters(init);
  for (Replica* r : raw) {
    CUDA_CHECK(cudaMemset(r->gradient_buffer(), 0xFF, L::kGradCount * sizeof(float)));
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::unique_ptr<Communicator> communicator;
  switch (reduce) {
    case Reduce::host:
      REQUIRE(replicas == 1);
      communicator = make_host_communicator();  // nothing to sum
      break;
    case Reduce::nccl:
      communicator = make_nccl_communicator(raw);
      break;
    case Reduce::same_device:
      communicator = make_same_device_communicator(raw);
      break;
  }

  TrainConfig config;
  config.epochs = 1000;  // max_steps ends the run
  config.max_steps = kSteps;
  config.batch_size = batch;
  config.sgd.momentum = momentum;
  config.seed = kSeed;
  config.log_interval = observe ? 1 : 0;
  config.evaluate = false;
  Trainer trainer(std::move(owned), std::move(communicator), data.train.count, config);
  LossRecorder recorder;
  trainer.run(recorder);

  Run run;
  run.steps = recorder.steps;
  run.losses = recorder.losses;
  for (const auto& replica : trainer.replicas()) {
    auto& cuda = dynamic_cast<CudaReplica&>(*replica);
    run.params.emplace_back(L::kCount, std::numeric_limits<float>::quiet_NaN());
    cuda.store_parameters(run.params.back());
    REQUIRE(cuda.has_momentum() == (momentum != 0.0f));
    run.momentum.emplace_back(momentum != 0.0f ? L::kCount : 0, std::numeric_limits<float>::quiet_NaN());
    if (momentum != 0.0f) cuda.store_momentum(run.momentum.back());
    run.counts.push_back(cuda.graph_counts());
    run.fused_head_steps.push_back(cuda.fused_head_steps());
    run.fused_steps.push_back(cuda.fused_steps());
    run.persistent_steps.push_back(cuda.persistent_steps());
    run.persistent_launches.push_back(cuda.persistent_launches());
  }
  return run;
}

// The largest normwise relative difference between two runs' parameters, momentum and losses.
double distance(const Run& a, const Run& b) {
  double d = 0.0;
  for (std::size_t r = 0; r < std::min(a.params.size(), b.params.size()); ++r) {
    d = std::max(d, max_rel_error(a.params[r], b.params[r]));
    d = std::max(d, max_rel_error(a.momentum[r], b.momentum[r]));
  }
  for (std::size_t s = 0; s < std::min(a.losses.size(), b.losses.size()); ++s)
    d = std::max(d, rel_error(a.losses[s], b.losses[s]));
  return d;
}

// A run whose products are partly cuBLAS's and partly the fused kernels' (`mixed`) against the plain path's
// with cuBLAS (`plain`). The fused kernels sum in the hand-written GEMMs' order and cuBLAS in its own, which
// no GPU promises to be theirs (docs/kernels.md, "What holds to the bit on a GPU"), so the two runs drift
// apart as the steps compound their roundings. `control`, the plain path with every product hand-written, is
// as far from `plain` as two correct orders of the same sums end up after as many steps: `mixed`, which
// changes fewer products' order, must end no farther than twice that (a wrong or stale operand would put it
// orders of magnitude farther), and never needs to be nearer than the products' own 1e-5.
void check_drift(const Run& mixed, const Run& plain, const Run& control) {
  REQUIRE(mixed.steps == kSteps);
  REQUIRE(plain.steps == kSteps);
  REQUIRE(control.steps == kSteps);
  const double drift = distance(control, plain);
  const double got = distance(mixed, plain);
  CAPTURE(drift, got);
  CHECK(got <= std::max(1e-5, 2.0 * drift));
  if (!plain.losses.empty()) CHECK(plain.losses.back() < plain.losses.front());
}

void check_same(const Run& graphs, const Run& plain, GemmImpl gemm) {
  REQUIRE(plain.steps == kSteps);
  REQUIRE(graphs.steps == kSteps);
  REQUIRE(graphs.params.size() == plain.params.size());
  REQUIRE(graphs.losses.size() == plain.losses.size());
  for (std::size_t r = 0; r < plain.params.size(); ++r) {
    CAPTURE(r);
    if (gemm == GemmImpl::cublas) {
      CHECK(max_rel_error(graphs.params[r], plain.params[r]) <= 1e-5);
      CHECK(max_rel_error(graphs.momentum[r], plain.momentum[r]) <= 1e-5);
    } else {
      CHECK(bitwise_equal(graphs.params[r], plain.params[r]));
      CHECK(bitwise_equal(graphs.momentum[r], plain.momentum[r]));
    }
  }
  for (std::size_t s = 0; s < plain.losses.size(); ++s) {
    CAPTURE(s, graphs.losses[s], plain.losses[s]);
    if (gemm == GemmImpl::cublas) {
      CHECK(rel_error(graphs.losses[s], plain.losses[s]) <= 1e-5);
    } else {
      CHECK(graphs.losses[s] == plain.losses[s]);
    }
  }
  // It trained: the comparison is not one of two flat lines.
  if (!plain.losses.empty()) CHECK(plain.losses.back() < plain.losses.front());
}

}  // namespace

TEST_CASE("whole-step CUDA graphs (NCCL, world size 1) give the plain path's parameters across epochs",
          "[gpu][graphs][slow]") {
  const GemmImpl gemm = GENERATE(from_range(sweep<GemmImpl>(
      {GemmImpl::blocked, GemmImpl::tiled, GemmImpl::cublas}, {GemmImpl::blocked, GemmImpl::cublas})));
  const bool observe = GENERATE(true, false);
  CAPTURE(gemm_impl_name(gemm), observe);
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 31);
  const Run plain = train(data, {gemm, false}, 1, Reduce::nccl, observe);
  const Run graphs = train(data, {gemm, true}, 1, Reduce::nccl, observe);
  check_same(graphs, plain, gemm);

  // The replays really happened. Step 0 initialises the momentum buffer, the plain way; the first full batch
  // after it and the first short batch (the epoch's last step) run the plain way as warm-ups; the second of
  // each shape is captured; every other step is a replay.
  const CudaReplica::GraphCounts c = graphs.counts[0];
  CHECK(c.plain == 2);
  CHECK(c.captured == 2);
  CHECK(c.replayed == kSteps - 3);
  const CudaReplica::GraphCounts none = plain.counts[0];
  CHECK(none.captured + none.replayed + none.plain == 0);
}

TEST_CASE("gradient graphs with several replicas on one GPU give the plain path's parameters",
          "[gpu][graphs][slow]") {
  // Each replica's all-reduce needs the others', so it stays the communicator's; each replica replays a
  // graph of its gradient launches (22, 22 and 20 rows of the full batches; 14, 14 and 12 of the short one).
  // Under a sanitizer, three only: one replica's graphs are the whole-step test's.
  const int replicas = GENERATE(from_range(sweep({1, 3}, {3})));
  CAPTURE(replicas);
  const Reduce reduce = replicas == 1 ? Reduce::host : Reduce::same_device;
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 37);
  const Run plain = train(data, {GemmImpl::blocked, false}, replicas, reduce, false);
  const Run graphs = train(data, {GemmImpl::blocked, true}, replicas, reduce, false);
  check_same(graphs, plain, GemmImpl::blocked);
  for (std::size_t r = 0; r < graphs.counts.size(); ++r) {
    CAPTURE(r);
    // The gradients do not depend on the momentum: only the first step of each shape runs the plain way.
    CHECK(graphs.counts[r].plain == 2);
    CHECK(graphs.counts[r].captured == 2);
    CHECK(graphs.counts[r].replayed == kSteps - 2);
  }
}

TEST_CASE("the fused head gives the plain path's parameters across epochs, with and without graphs",
          "[gpu][fused_head][slow]") {
  const std::vector<GemmImpl> gemms = sweep<GemmImpl>(
      {GemmImpl::blocked, GemmImpl::slab, GemmImpl::naive, GemmImpl::cublas}, {GemmImpl::slab});
  const std::size_t g = GENERATE_COPY(range(std::size_t{0}, gemms.size()));
  const GemmImpl gemm = gemms[g];
  // Three replicas: shards of 22, 22 and 20 rows (14, 14 and 12 in the short batch), summed on the device.
  const int replicas = GENERATE(1, 3);
  // With graphs or without, in turn: each GEMM meets both, as does each number of replicas.
  const bool graphs = (g + (replicas == 1 ? 0 : 1)) % 2 == 1;
  CAPTURE(gemm_impl_name(gemm), graphs, replicas);
  const Reduce reduce = replicas == 1 ? Reduce::nccl : Reduce::same_device;
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 47);
  const Run plain = train(data, {gemm, false, false}, replicas, reduce, true);
  const Run fused = train(data, {gemm, graphs, true}, replicas, reduce, true);
  if (gemm == GemmImpl::cublas)
    check_drift(fused, plain, train(data, {GemmImpl::naive, false, false}, replicas, reduce, true));
  else
    check_same(fused, plain, gemm);
  for (std::size_t r = 0; r < fused.fused_head_steps.size(); ++r) {
    CAPTURE(r);
    CHECK(plain.fused_head_steps[r] == 0);
    // The count is of launches and captures; a replay runs what was captured. Without graphs every step
    // launches the head; with them, the steps that did not replay (and the captures) did.
    if (graphs) {
      CHECK(fused.fused_head_steps[r] >= 2);
      CHECK(fused.fused_head_steps[r] + fused.counts[r].replayed >= kSteps);
    } else {
      CHECK(fused.fused_head_steps[r] == kSteps);
    }
  }
}

TEST_CASE("the fused step gives the plain path's parameters across epochs", "[gpu][fused_step][slow]") {
  // One replica through NCCL at world size 1: a lone replica, whose steps the trainer hands it whole, and
  // each step after the first (momentum's, the plain way) runs as the three kernels, launched or replayed.
  // The plain run's kernels sum in the same orders, so the parameters, the momentum and every logged loss
  // agree to the bit; with cuBLAS, whose products the fused kernels replace, within a control's drift.
  const std::vector<GemmImpl> gemms = sweep<GemmImpl>(
      {GemmImpl::blocked, GemmImpl::slab, GemmImpl::naive, GemmImpl::cublas}, {GemmImpl::slab});
  const std::size_t g = GENERATE_COPY(range(std::size_t{0}, gemms.size()));
  const GemmImpl gemm = gemms[g];
  const bool observe = GENERATE(true, false);
  // Without momentum the kernel runs from step 0, with no momentum buffer at all. With it or without, in
  // turn: each GEMM meets both, as does each way of observing (half the runs of every combination).
  const float momentum = (g + (observe ? 0 : 1)) % 2 == 0 ? 0.9f : 0.0f;
  CAPTURE(gemm_impl_name(gemm), observe, momentum);
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 59);
  const CudaStepOptions fast{gemm, /*cuda_graphs=*/true, /*fused_head=*/true, /*fused_step=*/true};
  const Run plain = train(data, {gemm, false, false, false}, 1, Reduce::nccl, observe, kBatch, momentum);
  const Run fused = train(data, fast, 1, Reduce::nccl, observe, kBatch, momentum);
  if (gemm == GemmImpl::cublas)
    check_drift(
        fused, plain,
        train(data, {GemmImpl::naive, false, false, false}, 1, Reduce::nccl, observe, kBatch, momentum));
  else
    check_same(fused, plain, gemm);
  // With momentum, step 0 (the buffer's first step) runs the plain way. The first step of each shape (the
  // full batch, the short one) launches the three kernels one by one and the second captures them: 4
  // enqueued; every other step is a replay.
  const long untracked = momentum != 0.0f ? 1 : 0;
  CHECK(fused.fused_steps[0] == 4);
  CHECK(fused.counts[0].plain == 2);
  CHECK(fused.counts[0].captured == 2);
  CHECK(fused.counts[0].replayed == kSteps - 2 - untracked);
}

TEST_CASE("the fused step launched programmatically gives the plain path's parameters across epochs",
          "[gpu][fused_step][slow]") {
  // As above, with the second and third kernels launched programmatically (--pdl): the launch changes when a
  // kernel may be scheduled, never what it computes.
  const GemmImpl gemm =
      GENERATE(from_range(sweep<GemmImpl>({GemmImpl::slab, GemmImpl::blocked}, {GemmImpl::blocked})));
  const bool observe = GENERATE(true, false);
  CAPTURE(gemm_impl_name(gemm), observe);
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 61);
  const CudaStepOptions fast{gemm, /*cuda_graphs=*/true, /*fused_head=*/true, /*fused_step=*/true,
                             /*programmatic_launch=*/true};
  const Run plain = train(data, {gemm, false, false, false}, 1, Reduce::nccl, observe);
  const Run fused = train(data, fast, 1, Reduce::nccl, observe);
  check_same(fused, plain, gemm);
  CHECK(fused.fused_steps[0] == 4);
  CHECK(fused.counts[0].replayed == kSteps - 3);
}

TEST_CASE("the fused step stands aside where the all-reduce is not the replica's",
          "[gpu][fused_step][slow]") {
  // Three replicas on one GPU: each all-reduce needs the others', so the steps are the gradient graphs with
  // the fused head, and the results the plain path's to the bit.
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 61);
  const CudaStepOptions fast{GemmImpl::blocked, /*cuda_graphs=*/true, /*fused_head=*/true,
                             /*fused_step=*/true};
  const Run plain = train(data, {GemmImpl::blocked, false, false, false}, 3, Reduce::same_device, false);
  const Run fused = train(data, fast, 3, Reduce::same_device, false);
  check_same(fused, plain, GemmImpl::blocked);
  for (std::size_t r = 0; r < fused.fused_steps.size(); ++r) {
    CAPTURE(r);
    CHECK(fused.fused_steps[r] == 0);
    CHECK(fused.fused_head_steps[r] > 0);
  }
}

TEST_CASE("a shard too large for the fused head runs the plain launches, with the same results",
          "[gpu][fused_head]") {
  // Batch 700 over 1,000 rows: steps of 700 rows (over the 601 the head takes) and of 300 (under), in turn.
  const DataSplits data = testing::synthetic_splits(1000, 10, 53);
  const Run plain = train(data, {GemmImpl::blocked, false, false}, 1, Reduce::nccl, true, 700);
  const Run fused = train(data, {GemmImpl::blocked, false, true}, 1, Reduce::nccl, true, 700);
  check_same(fused, plain, GemmImpl::blocked);
  CHECK(fused.fused_head_steps[0] == kSteps / 2);
  // The fused step likewise: the 300-row steps take it, the 700-row ones the whole-step graph without it.
  const Run step = train(data, {GemmImpl::blocked, true, true, true}, 1, Reduce::nccl, true, 700);
  check_same(step, plain, GemmImpl::blocked);
  // Step 0 is momentum's first, the plain way; then each shape's first step runs its kernels one by one and
  // its second captures them: the 300-row shape's two count as fused steps (replays are not counted).
  CHECK(step.fused_steps[0] == 2);
  CHECK(step.counts[0].captured == 2);
}

TEST_CASE("a lone replica's whole steps mix with steps taken in two calls, and with reads between",
          "[gpu][graphs]") {
  // Driven by hand, as a test or a tool may drive a replica: whole steps (step_alone) among steps taken as
  // compute_gradients, the all-reduce and sgd_step, with the gradients and the loss read between those
  // calls, a new order in the middle of an epoch, and steps of several shapes.
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 41);
  std::vector<float> init(L::kCount);
  init_parameters(init, 43);
  std::vector<std::int32_t> order(static_cast<std::size_t>(data.train.count)), other(order.size());
  epoch_order(order, 44, 0);
  epoch_order(other, 44, 1);
  SgdConfig sgd;
  sgd.momentum = 0.9f;

  struct Probe {
    std::vector<float> grads;   // read between compute_gradients and sgd_step, where the script says so
    std::vector<float> losses;  // loss_sum after each step
    std::vector<float> params;
    long whole_steps = 0;  // steps step_alone took
  };
  // With graphs, also as the fused step.
  auto drive = [&](bool graphs, bool fused_step) {
    CudaStepOptions options{GemmImpl::blocked, graphs, graphs && fused_step, graphs && fused_step};
    options.alone = true;
    CudaReplica replica(data, 0, options);
    CHECK((replica.description().find("CUDA graphs") != std::string::npos) == graphs);
    replica.load_parameters(init);
    std::vector<Replica*> raw{&replica};
    const auto nccl = make_nccl_communicator(raw);
    Probe probe;
    replica.set_epoch_order(order);
    for (int step = 0; step < 40; ++step) {
      if (step == 20) replica.set_epoch_order(other);  // a new order in the middle: rows from the new one
      // Offsets that repeat and jump: 0, 64, ..., then back, and a few rows short of the end.
      const int first = (step * kBatch) % (data.train.count - kBatch);
      const int count = step % 7 == 6 ? 33 : kBatch;
      if (step % 5 < 3 && replica.step_alone(first, count, sgd)) {
        ++probe.whole_steps;
      } else {
        replica.compute_gradients(first, count, count);
        nccl->all_reduce_gradients(raw);
        if (step % 5 == 3) {
          // The copy waits for the gradients (NaN where they were not written).
          probe.grads.resize(probe.grads.size() + L::kGradCount, std::numeric_limits<float>::quiet_NaN());
          float* grads = replica.gradient_buffer();
          CUDA_CHECK(cudaStreamSynchronize(replica.stream()));
          CUDA_CHECK(cudaMemcpy(probe.grads.data() + probe.grads.size() - L::kGradCount, grads,
                                L::kGradCount * sizeof(float), cudaMemcpyDeviceToHost));
        }
        if (step % 5 == 4) probe.losses.push_back(replica.loss_sum());  // read before the step, too
        replica.sgd_step(sgd);
      }
      probe.losses.push_back(replica.loss_sum());
    }
    probe.params.assign(L::kCount, std::numeric_limits<float>::quiet_NaN());
    replica.store_parameters(probe.params);
    if (graphs) CHECK(replica.graph_counts().replayed > 0);
    return probe;
  };
  const Probe plain = drive(false, false);
  // The plain way has nothing to gain from a whole step: it declines, and the two calls run.
  CHECK(plain.whole_steps == 0);
  for (const bool fused_step : {false, true}) {
    CAPTURE(fused_step);
    const Probe graphs = drive(true, fused_step);
    // Every step offered whole but step 0 (the momentum buffer's first, the plain way) was taken whole.
    CHECK(graphs.whole_steps == 24 - 1);
    CHECK(bitwise_equal(graphs.grads, plain.grads));
    CHECK(bitwise_equal(graphs.losses, plain.losses));
    CHECK(bitwise_equal(graphs.params, plain.params));
  }
}

TEST_CASE("several steps a graph give the plain path's parameters across epochs", "[gpu][graphs][slow]") {
  // steps_per_graph 3 and 7 against epochs of kFullBatches full batches and a short one: queues cut short by
  // the short batch and by the epoch's end, remainders of every size. observe: a loss read after every step,
  // which launches each step as it comes.
  const bool observe = GENERATE(true, false);
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 67);
  // One plain run for every queue below: it depends on none of their settings.
  const Run plain = train(data, {GemmImpl::slab, false, false, false}, 1, Reduce::nccl, observe);
  for (const int per_graph : sweep({3, 7}, {3})) {
    for (const bool fused_step : {false, true}) {
      CAPTURE(per_graph, fused_step, observe);
      CudaStepOptions fast{GemmImpl::slab, /*cuda_graphs=*/true, fused_step, fused_step};
      fast.steps_per_graph = per_graph;
      const Run queued = train(data, fast, 1, Reduce::nccl, observe);
      check_same(queued, plain, GemmImpl::slab);
      if (observe)
        CHECK(queued.counts[0].multi_step == 0);
      else
        CHECK(queued.counts[0].multi_step > 0);
    }
  }
}

TEST_CASE("the persistent kernel gives the plain path's parameters across epochs",
          "[gpu][persistent][slow]") {
  // Steps a launch 1, 7 and 64 against epochs of kFullBatches full batches and a short one (observe: a loss
  // read after every step, which launches each step as it comes); one block an SM, and two with 7 steps a
  // launch (where they stay resident: on an H200, four do; the kernel's own test covers other grids). The
  // phases run the fused step's code, whose sums are the hand-written GEMMs': the plain path's bits, with no
  // graph at all.
  const bool observe = GENERATE(true, false);
  const float momentum = GENERATE(from_range(sweep<float>({0.9f, 0.0f}, {0.9f})));
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 89);
  // One plain run for every launch size below: it depends on none of the persistent kernel's settings.
  const Run plain =
      train(data, {GemmImpl::slab, false, false, false}, 1, Reduce::nccl, observe, kBatch, momentum);
  for (const int per_launch : sweep({1, 7, 64}, {1, 7})) {
    const int blocks_per_sm = per_launch == 7 ? std::min(2, cuda::persistent_step_max_blocks_per_sm()) : 1;
    CAPTURE(per_launch, observe, momentum, blocks_per_sm);
    CudaStepOptions fast{GemmImpl::slab, /*cuda_graphs=*/true, /*fused_head=*/true, /*fused_step=*/true};
    fast.persistent = true;
    fast.steps_per_graph = per_launch;
    fast.persistent_blocks_per_sm = blocks_per_sm;
    const Run persistent = train(data, fast, 1, Reduce::nccl, observe, kBatch, momentum);
    check_same(persistent, plain, GemmImpl::slab);
    // Every step but momentum's first (the plain way) ran in the persistent kernel, and no graph ran.
    const long untracked = momentum != 0.0f ? 1 : 0;
    CHECK(persistent.persistent_steps[0] == kSteps - untracked);
    CHECK(persistent.fused_steps[0] == 0);
    CHECK(persistent.counts[0].captured + persistent.counts[0].replayed == 0);
    if (observe || per_launch == 1)
      CHECK(persistent.persistent_launches[0] == kSteps - untracked);
    else
      CHECK(persistent.persistent_launches[0] < persistent.persistent_steps[0]);
  }
}

TEST_CASE("queued steps are launched before anything reads or changes what they change", "[gpu][graphs]") {
  // Driven by hand: runs of contiguous steps (which queue) cut by jumps, by a shorter shard, by an empty one
  // and by new SGD settings, with the parameters, the gradients, the momentum and an evaluation read in
  // between, an earlier momentum written back while steps are queued, and a new order in the middle; at the
  // end the communicator goes first, then the parameters are read (which launches the queue).
  const DataSplits data = testing::synthetic_splits(kTrainRows, 10, 73);
  std::vector<float> init(L::kCount);
  init_parameters(init, 79);
  std::vector<std::int32_t> order(static_cast<std::size_t>(data.train.count)), other(order.size());
  epoch_order(order, 83, 0);
  epoch_order(other, 83, 1);
  SgdConfig sgd;
  sgd.momentum = 0.9f;
  // The queue launched as graphs of whole steps, of fused steps, or as the persistent kernel.
  struct Queue {
    bool fused_step;
    bool persistent;
  };

  struct Probe {
    std::vector<float> params;  // every read, one after the other
    std::vector<float> grads;
    std::vector<double> eval;
  };
  auto drive = [&](bool queue, Queue how) {
    const bool fused_step = how.fused_step;
    const bool persistent = how.persistent;
    CudaStepOptions step{GemmImpl::slab, queue, queue && fused_step, queue && fused_step};
    step.steps_per_graph = queue ? 4 : 1;
    step.persistent = queue && persistent;
    step.alone = true;
    CudaReplica replica(data, 0, step);
    replica.load_parameters(init);
    std::vector<Replica*> raw{&replica};
    auto nccl = make_nccl_communicator(raw);
    Probe probe;
    std::vector<float> saved_momentum(L::kCount);
    SgdConfig faster = sgd;
    faster.lr = 0.02f;
    auto read_params = [&] {
      probe.params.resize(probe.params.size() + L::kCount, std::numeric_limits<float>::quiet_NaN());
      replica.store_parameters(std::span<float>(probe.params).last(L::kCount));
    };
    replica.set_epoch_order(order);
    int first = 0;
    for (int step_index = 0; step_index < 60; ++step_index) {
      if (step_index == 40) replica.set_epoch_order(other);
      const int count = step_index == 50 ? 0 : step_index % 9 == 8 ? 33 : kBatch;
      if (step_index % 10 == 9 || first + count > data.train.count)
        first = (step_index * 37) % std::min(400, data.train.count - kBatch);  // a jump
      // A lone replica's steps, as the trainer takes them: whole, or (an empty shard, the momentum buffer's
      // first step, the plain way) in two calls with the all-reduce between.
      const SgdConfig& settings = step_index >= 45 ? faster : sgd;
      if (!replica.step_alone(first, count, settings)) {
        replica.compute_gradients(first, count, std::max(count, 1));
        nccl->all_reduce_gradients(raw);
        replica.sgd_step(settings);
      }
      first += count;
      if (step_index % 13 == 12) read_params();
      if (step_index % 17 == 16) {
        probe.grads.resize(probe.grads.size() + L::kGradCount, std::numeric_limits<float>::quiet_NaN());
        float* grads = replica.gradient_buffer();
        CUDA_CHECK(cudaStreamSynchronize(replica.stream()));
        CUDA_CHECK(cudaMemcpy(probe.grads.data() + probe.grads.size() - L::kGradCount, grads,
                              L::kGradCount * sizeof(float), cudaMemcpyDeviceToHost));
      }
      if (step_index % 11 == 10) {
        const EvalResult e = replica.evaluate();
        probe.eval.push_back(e.loss_sum);
        probe.eval.push_back(static_cast<double>(e.correct));
      }
      if (step_index == 30) replica.store_momentum(saved_momentum);
      if (step_index == 35) replica.load_momentum(saved_momentum);
    }
    nccl.reset();
    read_params();
    if (queue && persistent) {
      CHECK(replica.graph_counts().multi_step == 0);
      CHECK(replica.persistent_steps() > replica.persistent_launches());  // several steps a launch
    } else if (queue) {
      CHECK(replica.graph_counts().multi_step > 0);
    }
    return probe;
  };
  const Probe plain = drive(false, {});
  for (const Queue how : {Queue{false, false}, Queue{true, false}, Queue{true, true}}) {
    CAPTURE(how.fused_step, how.persistent);
    const Probe queued = drive(true, how);
    CHECK(bitwise_equal(queued.params, plain.params));
    CHECK(bitwise_equal(queued.grads, plain.grads));
    CHECK(queued.eval == plain.eval);
  }
}

namespace {

// How a test makes the loss of a known step not finite.
enum class Poison {
  parameters,  // one parameter of the last replica set to NaN after the step before: that replica's loss,
               // and with it the all-reduced one, is NaN from this step on
  huge_lr,     // lr 1e30 from the start: the first step's loss is finite, the second's is not
};

// What the trainer said of a diverging run, and what replica 0 recorded on its device.
struct Divergence {
  long step = -1;  // named by the trainer, in all
  std::string message;
  long on_diverged = -1;  // the listener's step, in all
  bool metrics_loss_not_finite = false;
  std::optional<NonFiniteLoss> recorded;
  std::vector<CudaReplica::GraphCounts> counts;  // [replicas]
  long fused_steps = 0;
  long persistent_steps = 0;
  long persistent_launches = 0;
};

class DivergenceListener final : public TrainListener {
 public:
  DivergenceListener(const Trainer& trainer, long poison_after)
      : trainer_(trainer), poison_after_(poison_after) {}
  void on_step(int epoch, int step, int steps) override {
    const long done = static_cast<long>(epoch) * steps + step;
    if (done != poison_after_) return;
    Replica& last = *trainer_.replicas().back();
    std::vector<float> params(L::kCount);
    last.store_parameters(params);
    params[L::kFc2Bias] = std::numeric_limits<float>::quiet_NaN();
    last.load_parameters(params);
  }
  void on_diverged(const StepLoss& s) override {
    diverged_at = static_cast<long>(s.epoch) * trainer_.steps_per_epoch() + s.step;
    loss_not_finite = !std::isfinite(s.loss);
  }
  long diverged_at = -1;
  bool loss_not_finite = false;

 private:
  const Trainer& trainer_;
  long poison_after_;
};

// The divergence tests' training rows: epochs of 9 steps; under a sanitizer of 4 (3 full batches), so that
// queues of several steps form and replay before the poisoned step.
constexpr int kDivergenceRows = (kUnderSanitizer ? 3 : kFullBatches) * kBatch + 40;
// A resumed run's first step (epoch 1, step 4; under a sanitizer epoch 1, step 0), the step whose loss a
// test makes not finite (epoch 3, step 4; epoch 2, step 1) and the run's end.
constexpr long kStartStep = kUnderSanitizer ? 4 : 13;
constexpr long kPoisonedStep = kUnderSanitizer ? 9 : 31;
constexpr long kLastStep = kUnderSanitizer ? 12 : 40;
static_assert(kStartStep < kPoisonedStep && kPoisonedStep < kLastStep);

// A run of `replicas` replicas from step kStartStep that diverges at a known step, with no log line before
// it (log_interval): the host waits for the devices only at the poisoning and at the epoch's end, so the
// trainer can name the step only from the devices' record. Devices: each replica on device r % devices.
Divergence diverge(const DataSplits& data, const CudaStepOptions& step, int replicas, Reduce reduce,
                   Poison poison, int log_interval = 1000, int devices = 1) {
  std::vector<std::unique_ptr<Replica>> owned;
  std::vector<Replica*> raw;
  CudaStepOptions options = step;
  options.alone = replicas == 1;  // as the command line makes a lone replica
  for (int r = 0; r < replicas; ++r) {
    owned.push_back(make_cuda_replica(data, r % devices, options));
    raw.push_back(owned.back().get());
  }
  std::vector<float> init(L::kCount);
  init_parameters(init, kSeed);
  owned[0]->load_parameters(init);
  std::unique_ptr<Communicator> communicator =
      reduce == Reduce::nccl ? make_nccl_communicator(raw) : make_same_device_communicator(raw);
  TrainConfig config;
  config.epochs = 1000;
  config.max_steps = kLastStep;
  config.batch_size = kBatch;
  config.sgd.lr = poison == Poison::huge_lr ? 1e30f : 0.01f;
  config.seed = kSeed;
  config.log_interval = log_interval;
  config.evaluate = false;
  config.start_step = kStartStep;
  Trainer trainer(std::move(owned), std::move(communicator), data.train.count, config);
  DivergenceListener listener(trainer, poison == Poison::parameters ? kPoisonedStep - 1 : -1);
  Divergence d;
  try {
    trainer.run(listener);
  } catch (const TrainingDiverged& e) {
    d.message = e.what();
  }
  d.on_diverged = listener.diverged_at;
  d.metrics_loss_not_finite = listener.loss_not_finite;
  const int steps = trainer.steps_per_epoch();
  const std::regex named("at epoch ([0-9]+), step ([0-9]+) \\(the first step whose loss is not finite\\)");
  if (std::smatch m; std::regex_search(d.message, m, named))
    d.step = std::stol(m[1]) * steps + std::stol(m[2]);
  auto& first = dynamic_cast<CudaReplica&>(*trainer.replicas()[0]);
  d.recorded = first.first_nonfinite_loss();
  for (const auto& replica : trainer.replicas())
    d.counts.push_back(dynamic_cast<CudaReplica&>(*replica).graph_counts());
  d.fused_steps = first.fused_steps();
  d.persistent_steps = first.persistent_steps();
  d.persistent_launches = first.persistent_launches();
  return d;
}

// The step every run must name: the poisoned one, or the second with lr 1e30.
long expected_step(Poison poison) {
  return poison == Poison::parameters ? kPoisonedStep : kStartStep + 1;
}

void check_named(const Divergence& d, Poison poison) {
  CAPTURE(d.message);
  const long want = expected_step(poison);
  CHECK(d.step == want);
  CHECK(d.on_diverged == want);
  CHECK(d.metrics_loss_not_finite);
  REQUIRE(d.recorded.has_value());
  CHECK(d.recorded->step == want);
  CHECK_FALSE(std::isfinite(d.recorded->loss_sum));
}

}  // namespace

TEST_CASE("each step's loss is checked on the device and the first non-finite step named exactly",
          "[gpu][divergence]") {
  // Every way a step runs, with no log line before the bad step: without the device's record the trainer
  // would only see the loss at the epoch's end and name that step instead. With lr 1e30 the bad step is the
  // second of the run, inside a launch of several steps where steps are queued (the persistent kernel's
  // first launch, which takes the run's first steps up to the epoch's short batch, at most 7).
  struct Path {
    const char* name;
    CudaStepOptions options;
  };
  CudaStepOptions graphs{GemmImpl::blocked, /*cuda_graphs=*/true};
  CudaStepOptions fused_head{GemmImpl::blocked, /*cuda_graphs=*/false, /*fused_head=*/true};
  CudaStepOptions graphed_head{GemmImpl::blocked, true, true};
  CudaStepOptions fused_step{GemmImpl::slab, true, true, true};
  CudaStepOptions programmatic{GemmImpl::slab, true, true, true, /*programmatic_launch=*/true};
  CudaStepOptions per_graph = graphs;
  per_graph.steps_per_graph = 7;
  CudaStepOptions fused_per_graph = fused_step;
  fused_per_graph.steps_per_graph = 7;
  CudaStepOptions persistent = fused_step;
  persistent.persistent = true;
  persistent.steps_per_graph = 7;
  const std::vector<Path> paths{{"plain", {GemmImpl::blocked}},
                                {"cuda graphs", graphs},
                                {"fused head", fused_head},
                                {"fused head, cuda graphs", graphed_head},
                                {"fused step", fused_step},
                                {"fused step, programmatic launch", programmatic},
                                {"7 steps a graph", per_graph},
                                {"fused step, 7 steps a graph", fused_per_graph},
                                {"persistent, 7 steps a launch", persistent}};
  const Poison poison = GENERATE(Poison::parameters, Poison::huge_lr);
  CAPTURE(poison == Poison::parameters ? "poisoned parameters" : "lr 1e30");
  const DataSplits data = testing::synthetic_splits(kDivergenceRows, 10, 97);
  for (const Path& path : paths) {
    CAPTURE(path.name);
    const Divergence d = diverge(data, path.options, 1, Reduce::nccl, poison);
    check_named(d, poison);
    // The fast paths really ran.
    const CudaReplica::GraphCounts c = d.counts[0];
    if (path.options.persistent) {
      CHECK(d.persistent_launches < d.persistent_steps);
    } else if (path.options.steps_per_graph > 1 && poison == Poison::parameters) {
      CHECK(c.multi_step > 0);
    } else if (path.options.cuda_graphs && poison == Poison::parameters) {
      CHECK(c.replayed > 0);
    }
    if (path.options.fused_step && !path.options.persistent) CHECK(d.fused_steps > 0);
  }
}

TEST_CASE("the loss checked on the device names the first non-finite step with three replicas",
          "[gpu][divergence]") {
  // Only the last replica's parameters are poisoned: its own loss is NaN, the other two's finite, and each
  // replica checks the all-reduced sum, so replica 0 names the step too. On one GPU (the same-device sum,
  // plain and with gradient graphs and the fused head) and through NCCL over three GPUs where there are.
  const DataSplits data = testing::synthetic_splits(kDivergenceRows, 10, 101);
  const Poison poison = GENERATE(Poison::parameters, Poison::huge_lr);
  const bool fast = GENERATE(false, true);
  CAPTURE(poison == Poison::parameters ? "poisoned parameters" : "lr 1e30", fast);
  const CudaStepOptions options{GemmImpl::blocked, fast, fast};
  check_named(diverge(data, options, 3, Reduce::same_device, poison), poison);
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  if (count >= 3) {
    const Divergence d = diverge(data, options, 3, Reduce::nccl, poison, 1000, 3);
    check_named(d, poison);
  } else {
    WARN("NCCL over three GPUs not run: " << count << " visible");
  }
}

TEST_CASE("the device's record and the log lines name the same step", "[gpu][divergence]") {
  // A log line every step reads every loss on the host: the step it names is the first bad one whatever the
  // record says. The record must agree, on the plain path and on the fastest.
  const DataSplits data = testing::synthetic_splits(kDivergenceRows, 10, 103);
  CudaStepOptions persistent{GemmImpl::slab, true, true, true};
  persistent.persistent = true;
  persistent.steps_per_graph = 7;
  for (const CudaStepOptions& options : {CudaStepOptions{GemmImpl::slab}, persistent}) {
    CAPTURE(options.persistent);
    const Divergence every = diverge(data, options, 1, Reduce::nccl, Poison::parameters, 1);
    const Divergence none = diverge(data, options, 1, Reduce::nccl, Poison::parameters, 1000);
    CHECK(every.step == kPoisonedStep);
    CHECK(none.step == every.step);
  }
}
