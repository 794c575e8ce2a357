// CudaReplica, whole training steps, against a CPU computation made of the reference ops (kernels/*_ref.cpp)
// on the same parameters, data and order.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "host/cuda/cuda_replica.hpp"
#include "host/model/params.hpp"
#include "kernels/cuda/fused/persistent_step.hpp"
#include "kernels/ref/gather.hpp"
#include "kernels/ref/linear.hpp"
#include "kernels/ref/sgd.hpp"
#include "kernels/ref/softmax_xent.hpp"
#include "tests/gpu/gpu_test_util.hpp"

using namespace mnistdp;
using namespace mnistdp::gpu_test;

namespace {

using L = ParamLayout;
const std::vector<GemmImpl> kImpls = all_gemms();

// A learnable data set: each class has a random template; an image is its class's template plus noise.
Dataset make_split(int count, const std::vector<std::uint8_t>& templates, Rng& rng) {
  Dataset d;
  d.count = count;
  d.images.resize(static_cast<std::size_t>(count) * L::kInput);
  d.labels.resize(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < d.labels.size(); ++i) {
    const auto label = static_cast<std::uint8_t>(rng.below(L::kClasses));
    d.labels[i] = label;
    for (std::size_t p = 0; p < L::kInput; ++p) {
      const int t = templates[label * std::size_t{L::kInput} + p];
      const int v = t + static_cast<int>(rng.below(121)) - 60;
      d.images[i * L::kInput + p] = static_cast<std::uint8_t>(std::clamp(v, 0, 255));
    }
  }
  return d;
}

DataSplits make_data(int train, int test, std::uint64_t seed) {
  Rng rng(seed);
  const auto templates = random_bytes(std::size_t{L::kClasses} * L::kInput, rng);
  DataSplits s;
  s.train = make_split(train, templates, rng);
  s.test = make_split(test, templates, rng);
  s.name = "gpu-test";
  return s;
}

// nn.Linear's default initialisation: weights and biases from U(-1/sqrt(in), 1/sqrt(in)).
std::vector<float> init_params(std::uint64_t seed) {
  Rng rng(seed);
  std::vector<float> p(L::kCount);
  auto fill = [&](std::size_t from, std::size_t to, int fan_in) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
    for (std::size_t i = from; i < to; ++i)
      p[i] = rng.uniform(-bound, bound);
  };
  fill(L::kFc1Weight, L::kFc2Weight, L::kInput);  // fc1 weight and bias
  fill(L::kFc2Weight, L::kCount, L::kHidden);     // fc2 weight and bias
  return p;
}

std::vector<std::int32_t> shuffled(int n, Rng& rng) {
  std::vector<std::int32_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  rng.shuffle(std::span<std::int32_t>(order));
  return order;
}

// The same step as CudaReplica's, one reference op after another, in host memory.
struct CpuModel {
  std::vector<float> params;
  std::vector<float> grads = std::vector<float>(L::kGradCount, 0.0f);
  std::vector<float> momentum = std::vector<float>(L::kCount, 0.0f);
  bool has_momentum = false;
  Activation activation = Activation::relu;
  std::vector<float> z =
      std::vector<float>();  // fc1's pre-activation, kept for an activation whose derivative reads it

  void forward(const float* x, int rows, std::vector<float>& h, std::vector<float>& logits) {
    const auto w = ParamViews<const float>::of(params.data());
    h.resize(static_cast<std::size_t>(rows) * L::kHidden);
    logits.resize(static_cast<std::size_t>(rows) * L::kClasses);
    z.resize(h.size());
    ref::linear_forward(x, w.fc1_weight, w.fc1_bias, h.data(), {rows, L::kInput, L::kHidden}, activation,
                        z.data());
    ref::linear_forward(h.data(), w.fc2_weight, w.fc2_bias, logits.data(), {rows, L::kHidden, L::kClasses},
                        Activation::identity);
  }

  void compute_gradients(const Dataset& train, const std::int32_t* rows_idx, int count, int global_batch) {
    std::vector<float> x(static_cast<std::size_t>(count) * L::kInput), h, logits;
    std::vector<std::uint8_t> y(static_cast<std::size_t>(count));
    ref::gather_normalize(train.images.data(), train.labels.data(), rows_idx, x.data(), y.data(), count,
                          L::kInput);
    forward(x.data(), count, h, logits);
    std::vector<float> dlogits(logits.size()), dh(h.size());
    grads[L::kLossSlot] = ref::softmax_xent(logits.data(), y.data(), dlogits.data(), count, L::kClasses,
                                            1.0f / static_cast<float>(global_batch));
    const auto w = ParamViews<const float>::of(params.data());
    const auto g = ParamViews<float>::of(grads.data());
    ref::linear_backward(dlogits.data(), h.data(), w.fc2_weight, g.fc2_weight, g.fc2_bias, dh.data(),
                         {count, L::kHidden, L::kClasses}, activation, z.data());
    ref::linear_backward(dh.data(), x.data(), w.fc1_weight, g.fc1_weight, g.fc1_bias, nullptr,
                         {count, L::kInput, L::kHidden}, Activation::identity);
  }

  // The smallest |fc1 pre-activation| over the rows: how far the batch is from a ReLU mask that float
  // rounding could flip (a flipped unit changes its row's share of fc1's gradient entirely, far beyond any
  // tolerance).
  float min_abs_preactivation(const Dataset& train, const std::int32_t* rows_idx, int count) const {
    std::vector<float> x(static_cast<std::size_t>(count) * L::kInput),
        pre(static_cast<std::size_t>(count) * L::kHidden);
    std::vector<std::uint8_t> y(static_cast<std::size_t>(count));
    ref::gather_normalize(train.images.data(), train.labels.data(), rows_idx, x.data(), y.data(), count,
                          L::kInput);
    const auto w = ParamViews<const float>::of(params.data());
    ref::linear_forward(x.data(), w.fc1_weight, w.fc1_bias, pre.data(), {count, L::kInput, L::kHidden},
                        Activation::identity);
    float smallest = std::numeric_limits<float>::infinity();
    for (float v : pre)
      smallest = std::min(smallest, std::fabs(v));
    return smallest;
  }

  void sgd_step(const SgdConfig& cfg) {
    const bool with_momentum = cfg.momentum != 0.0f;
    ref::sgd_step(params.data(), grads.data(), with_momentum ? momentum.data() : nullptr, L::kCount, cfg,
                  with_momentum && !has_momentum);
    if (with_momentum) has_momentum = true;
  }

  // Loss sum, correct count, and how many rows have their two largest logits closer than `margin` (rows whose
  // argmax float rounding may legitimately flip).
  void evaluate(const Dataset& test, double& loss, long& correct, long& near_ties, float margin) {
    std::vector<std::int32_t> all(static_cast<std::size_t>(test.count));
    std::iota(all.begin(), all.end(), 0);
    std::vector<float> x(static_cast<std::size_t>(test.count) * L::kInput), h, logits;
    std::vector<std::uint8_t> y(static_cast<std::size_t>(test.count));
    ref::gather_normalize(test.images.data(), test.labels.data(), all.data(), x.data(), y.data(), test.count,
                          L::kInput);
    forward(x.data(), test.count, h, logits);
    loss = ref::softmax_xent(logits.data(), y.data(), nullptr, test.count, L::kClasses, 1.0f);
    correct = ref::count_correct(logits.data(), y.data(), test.count, L::kClasses);
    near_ties = 0;
    for (int i = 0; i < test.count; ++i) {
      std::vector<float> row(logits.begin() + i * L::kClasses, logits.begin() + (i + 1) * L::kClasses);
      std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<>());
      if (row[0] - row[1] < margin) ++near_ties;
    }
  }
};

std::vector<float> device_grads(CudaReplica& replica) {
  CUDA_CHECK(cudaStreamSynchronize(replica.stream()));
  return to_host(replica.gradient_buffer(), L::kGradCount);
}

// Per tensor: a gradient is compared with the norm of its own tensor (fc2's bias is far smaller than fc1's
// weight gradient; one max norm over the whole buffer would hide its errors).
void check_gradients(const std::vector<float>& got, const std::vector<float>& want, double tolerance) {
  struct Range {
    const char* name;
    std::size_t from, to;
  };
  for (const Range r :
       {Range{"fc1.weight", L::kFc1Weight, L::kFc1Bias}, Range{"fc1.bias", L::kFc1Bias, L::kFc2Weight},
        Range{"fc2.weight", L::kFc2Weight, L::kFc2Bias}, Range{"fc2.bias", L::kFc2Bias, L::kCount}}) {
    CAPTURE(r.name);
    const std::vector<float> g(got.begin() + static_cast<long>(r.from),
                               got.begin() + static_cast<long>(r.to));
    const std::vector<float> w(want.begin() + static_cast<long>(r.from),
                               want.begin() + static_cast<long>(r.to));
    CHECK(max_rel_error(g, w) <= tolerance);
  }
  CHECK(rel_error(got[L::kLossSlot], want[L::kLossSlot]) <= tolerance);
}

}  // namespace

TEST_CASE("one CUDA training step matches the CPU reference step", "[gpu][replica]") {
  const GemmImpl impl = GENERATE(from_range(all_gemms()));
  CAPTURE(gemm_impl_name(impl));
  const DataSplits data = make_data(200, 50, 11);
  Rng rng(12);
  const auto order = shuffled(data.train.count, rng);

  CpuModel cpu{init_params(17)};
  // Two summation orders of fc1's 784-term dot products differ here by up to about 1.5e-6 (OpenBLAS against
  // the reference, measured on these very inputs); the seeds are chosen so that no pre-activation lies within
  // 5e-5 of zero, so that no ReLU mask can differ between the CPU and the GPU.
  REQUIRE(cpu.min_abs_preactivation(data.train, order.data() + 5, 64) > 5e-5f);
  CudaReplica gpu(data, 0, {impl});
  gpu.load_parameters(cpu.params);
  gpu.set_epoch_order(order);

  cpu.compute_gradients(data.train, order.data() + 5, 64, 64);
  gpu.compute_gradients(5, 64, 64);
  check_gradients(device_grads(gpu), cpu.grads, 1e-5);
  CHECK(rel_error(gpu.loss_sum(), cpu.grads[L::kLossSlot]) <= 1e-5);

  SgdConfig cfg;
  cfg.lr = 0.01f;
  cfg.momentum = 0.9f;
  cpu.sgd_step(cfg);
  gpu.sgd_step(cfg);
  std::vector<float> params(L::kCount);
  gpu.store_parameters(params);
  CHECK(max_rel_error(params, cpu.params) <= 1e-5);
  REQUIRE(gpu.has_momentum());
  std::vector<float> momentum(L::kCount);
  gpu.store_momentum(momentum);
  CHECK(max_rel_error(momentum, cpu.momentum) <= 1e-5);
}

TEST_CASE("one CUDA training step with GELU matches the CPU reference step", "[gpu][replica]") {
  // GELU is smooth: no unit can flip between the CPU and the GPU, so any batch will do. The device's erff
  // and expf answer within their documented ulps of the C library's (on emulated devices too).
  const GemmImpl impl = GENERATE(GemmImpl::slab, GemmImpl::cublas);
  CAPTURE(gemm_impl_name(impl));
  const DataSplits data = make_data(200, 50, 13);
  Rng rng(14);
  const auto order = shuffled(data.train.count, rng);
  CpuModel cpu{init_params(19)};
  cpu.activation = Activation::gelu;
  CudaStepOptions options;
  options.gemm = impl;
  options.activation = Activation::gelu;
  CudaReplica gpu(data, 0, options);
  gpu.load_parameters(cpu.params);
  gpu.set_epoch_order(order);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemset(gpu.gradient_buffer(), 0xFF, L::kGradCount * sizeof(float)));  // NaN until written
  CUDA_CHECK(cudaDeviceSynchronize());

  cpu.compute_gradients(data.train, order.data() + 3, 61, 64);
  gpu.compute_gradients(3, 61, 64);
  check_gradients(device_grads(gpu), cpu.grads, 1e-5);

  // Evaluation's forward pass keeps no z: the same logits all the same.
  double loss = 0.0;
  long correct = 0, near_ties = 0;
  cpu.evaluate(data.test, loss, correct, near_ties, 1e-4f);
  const EvalResult got = gpu.evaluate();
  CHECK(rel_error(got.loss_sum, loss) <= 1e-5);
  CHECK(std::labs(got.correct - correct) <= near_ties);
}

TEST_CASE("shards scaled by the global batch sum to the batch's gradient on the GPU", "[gpu][replica]") {
  const DataSplits data = make_data(128, 16, 21);
  Rng rng(22);
  const auto order = shuffled(data.train.count, rng);
  CudaReplica gpu(data, 0, {GemmImpl::blocked});
  gpu.load_parameters(init_params(23));
  gpu.set_epoch_order(order);

  gpu.compute_gradients(0, 64, 64);
  const auto whole = device_grads(gpu);
  std::vector<float> sum(L::kGradCount, 0.0f);
  for (auto [first, count] :
       {std::pair{0, 22}, std::pair{22, 22}, std::pair{44, 20}}) {  // torch.chunk of 64 by 3
    gpu.compute_gradients(first, count, 64);
    const auto part = device_grads(gpu);
    for (std::size_t i = 0; i < sum.size(); ++i)
      sum[i] += part[i];
  }
  check_gradients(sum, whole, 1e-5);

  // A replica with no rows sends zeros, loss included.
  gpu.compute_gradients(64, 0, 64);
  const auto empty = device_grads(gpu);
  CHECK(std::all_of(empty.begin(), empty.end(), [](float v) { return v == 0.0f; }));
}

TEST_CASE("100 CUDA steps follow the CPU reference's loss curve", "[gpu][replica][slow]") {
  struct Run {
    GemmImpl impl;
    bool momentum;
  };
  const Run run =
      GENERATE(Run{GemmImpl::naive, false}, Run{GemmImpl::tiled, false}, Run{GemmImpl::blocked, false},
               Run{GemmImpl::cublas, false}, Run{GemmImpl::blocked, true}, Run{GemmImpl::cublas, true});
  CAPTURE(gemm_impl_name(run.impl), run.momentum);
  // 1000 rows: 15 batches of 64 and a short one of 40 per epoch, so the 100 steps cross epochs and short
  // batches.
  const DataSplits data = make_data(1000, 2500, 31);
  SgdConfig cfg;  // the reference program's optimiser: SGD(lr = 0.01)
  if (run.momentum) {
    // 0.5 rather than 0.9: with 0.9 the loss falls to about 0.002 within 100 steps, where a relative
    // tolerance measures the rounding of log(1 + 0.002) rather than the training.
    cfg.momentum = 0.5f;
    cfg.weight_decay = 5e-4f;
    cfg.nesterov = true;
  }
  constexpr int kSteps = 100;
  constexpr int kBatch = 64;

  CpuModel cpu{init_params(32)};
  CudaReplica gpu(data, 0, {run.impl});
  gpu.load_parameters(cpu.params);

  Rng rng(33);
  std::vector<std::int32_t> order;
  int next = data.train.count;  // start a new epoch at once
  std::vector<double> cpu_curve, gpu_curve;
  for (int step = 0; step < kSteps; ++step) {
    if (next >= data.train.count) {
      order = shuffled(data.train.count, rng);
      gpu.set_epoch_order(order);
      next = 0;
    }
    const int count = std::min(kBatch, data.train.count - next);
    cpu.compute_gradients(data.train, order.data() + next, count, count);
    gpu.compute_gradients(next, count, count);
    cpu_curve.push_back(static_cast<double>(cpu.grads[L::kLossSlot]) / count);
    gpu_curve.push_back(static_cast<double>(gpu.loss_sum()) / count);
    cpu.sgd_step(cfg);
    gpu.sgd_step(cfg);
    next += count;
  }
  for (int step = 0; step < kSteps; ++step) {
    CAPTURE(step, cpu_curve[static_cast<std::size_t>(step)], gpu_curve[static_cast<std::size_t>(step)]);
    CHECK(rel_error(gpu_curve[static_cast<std::size_t>(step)], cpu_curve[static_cast<std::size_t>(step)]) <=
          1e-4);
  }
  // It learned something (the data set is learnable), so the comparison above is not of two flat lines.
  CHECK(cpu_curve.back() < 0.5 * cpu_curve.front());

  // Evaluation over 2500 test rows: three chunks, the last one short.
  double cpu_loss = 0.0;
  long cpu_correct = 0, near_ties = 0;
  cpu.evaluate(data.test, cpu_loss, cpu_correct, near_ties, 1e-4f);
  const EvalResult eval = gpu.evaluate();
  CHECK(eval.count == data.test.count);
  CHECK(rel_error(eval.loss_sum, cpu_loss) <= 1e-4);
  CHECK(std::labs(eval.correct - cpu_correct) <= near_ties);
}

TEST_CASE("CUDA training is reproducible to the bit", "[gpu][replica]") {
  const DataSplits data = make_data(kUnderSanitizer ? 128 : 256, 16, 41);  // steps of 64 rows
  Rng rng(42);
  const auto order = shuffled(data.train.count, rng);
  const auto init = init_params(43);
  SgdConfig cfg;
  cfg.momentum = 0.9f;
  for (GemmImpl impl : kImpls) {
    CAPTURE(gemm_impl_name(impl));
    std::vector<float> runs[2];
    for (auto& params : runs) {
      CudaReplica gpu(data, 0, {impl});
      gpu.load_parameters(init);
      gpu.set_epoch_order(order);
      for (int first = 0; first < data.train.count; first += 64) {
        gpu.compute_gradients(first, 64, 64);
        gpu.sgd_step(cfg);
      }
      params.resize(L::kCount);
      gpu.store_parameters(params);
    }
    CHECK(bitwise_equal(runs[0], runs[1]));
  }
}

TEST_CASE("CudaReplica checks its arguments and describes itself", "[gpu][replica]") {
  const DataSplits data = make_data(100, 10, 51);
  CudaReplica gpu(data, 0, {GemmImpl::cublas});
  CHECK(gpu.description().find("cuda:0") == 0);
  CHECK(gpu.description().find("cublas") != std::string::npos);
  CHECK(gpu.device_bytes() > data.train.images.size());
  CHECK_THROWS_AS(gpu.compute_gradients(0, 10, 10), std::logic_error);  // no epoch order yet
  CHECK_THROWS_AS(gpu.set_epoch_order(std::vector<std::int32_t>(99, 0)), std::invalid_argument);
  CHECK_THROWS_AS(gpu.set_epoch_order(std::vector<std::int32_t>(100, 100)), std::invalid_argument);
  std::vector<std::int32_t> order(100);
  std::iota(order.begin(), order.end(), 0);
  gpu.set_epoch_order(order);
  CHECK_THROWS_AS(gpu.compute_gradients(90, 20, 64), std::out_of_range);
  CHECK_THROWS_AS(gpu.compute_gradients(0, 64, 32), std::invalid_argument);
  CHECK_THROWS_AS(gpu.load_parameters(std::vector<float>(10)), std::invalid_argument);
  CHECK_FALSE(gpu.has_momentum());
  CHECK_THROWS_AS(make_cuda_replica(data, 1 << 20, {GemmImpl::blocked}), std::invalid_argument);
  // A larger shard than the activations were sized for grows them.
  gpu.compute_gradients(0, 100, 100);
  CHECK(std::isfinite(gpu.loss_sum()));
}

TEST_CASE("CudaReplica refuses a persistent kernel it cannot run, and names it",
          "[gpu][replica][persistent]") {
  using Catch::Matchers::Contains;
  const DataSplits data = make_data(100, 10, 53);
  CudaStepOptions step{GemmImpl::slab, true, true, true};
  step.persistent = true;
  // Without the fused step (or the graphs) there are no whole steps to run in it.
  CudaStepOptions no_fused = step;
  no_fused.fused_step = false;
  CHECK_THROWS_WITH(CudaReplica(data, 0, no_fused), Contains("runs fused steps"));
  // More blocks an SM than stay resident.
  CudaStepOptions too_many = step;
  too_many.persistent_blocks_per_sm = cuda::persistent_step_max_blocks_per_sm() + 1;
  CHECK_THROWS_WITH(CudaReplica(data, 0, too_many), Contains("blocks an SM"));
  too_many.persistent_blocks_per_sm = 0;
  CHECK_THROWS_WITH(CudaReplica(data, 0, too_many), Contains("blocks an SM"));
  // It runs the kernel only for a lone replica, and says so.
  CudaReplica gpu(data, 0, step);
  CHECK(gpu.description().find("persistent") == std::string::npos);
  CHECK_THAT(gpu.description(), Contains("fused head for shards of up to 601 rows (the fused step needs a "
                                         "lone replica)"));
  CHECK(gpu.launch_way() == StepLaunchWay::persistent);
  CudaStepOptions alone = step;
  alone.alone = true;
  CudaReplica lone(data, 0, alone);
  CHECK_THAT(lone.description(),
             Contains("fused step, persistent kernel for shards of up to 601 rows, 1 step "
                      "a launch, 1 block an SM"));
}

TEST_CASE("the CUDA devices are listed and GEMM names parse", "[gpu]") {
  std::string why;
  const int count = count_cuda_devices(why);
  REQUIRE(count >= 1);
  CHECK(why.empty());
  const auto devices = list_cuda_devices({}, why);
  REQUIRE(devices.size() == static_cast<std::size_t>(count));
  CHECK(why.empty());
  CHECK(devices[0].index == 0);
  const auto last = list_cuda_devices({count - 1}, why);
  REQUIRE(last.size() == 1);
  CHECK(last[0].index == count - 1);
  CHECK_FALSE(devices[0].name.empty());
  CHECK(devices[0].total_memory >= devices[0].free_memory);
  CHECK(devices[0].sm_count > 0);
  for (GemmImpl impl : kImpls)
    CHECK(parse_gemm_impl(std::string(gemm_impl_name(impl))) == impl);
  CHECK_THROWS_AS(parse_gemm_impl("fast"), std::invalid_argument);
}
