// Runner: whole training steps in every way of launching them, and the persistent kernel's phases.
#include "bench/kernels/runner.hpp"

namespace mnistdp::bench {

namespace {

// One step's parameters and gradients after `launch`, against the reference step on the same rows.
template <typename Data, typename Buffers>
Check check_step(const Data& data, Buffers& buf, int batch, const SgdConfig& sgd, const LaunchFn& launch,
                 cudaStream_t s) {
  std::vector<float> params = to_host(buf.params.data(), ParamLayout::kCount);
  launch(0);
  CUDA_CHECK(cudaStreamSynchronize(s));
  const auto got_params = to_host(buf.params.data(), ParamLayout::kCount);
  const auto got_grads = to_host(buf.grads.data(), ParamLayout::kGradCount);
  // The same step with the reference ops.
  std::vector<float> x(sz(batch) * kIn), h(sz(batch) * kHid), dh(sz(batch) * kHid), logits(sz(batch) * kOut),
      dlogits(sz(batch) * kOut), grads(ParamLayout::kGradCount);
  std::vector<std::uint8_t> y(sz(batch));
  const auto w = ParamViews<const float>::of(params.data());
  const auto g = ParamViews<float>::of(grads.data());
  ref::gather_normalize(data.host_images.data(), data.host_labels.data(), data.host_order.data(), x.data(),
                        y.data(), batch, kIn);
  ref::linear_forward(x.data(), w.fc1_weight, w.fc1_bias, h.data(), {batch, kIn, kHid}, Activation::relu);
  ref::linear_forward(h.data(), w.fc2_weight, w.fc2_bias, logits.data(), {batch, kHid, kOut},
                      Activation::identity);
  grads[ParamLayout::kLossSlot] =
      ref::softmax_xent(logits.data(), y.data(), dlogits.data(), batch, kOut, 1.0f / kGlobalBatch);
  ref::linear_backward(dlogits.data(), h.data(), w.fc2_weight, g.fc2_weight, g.fc2_bias, dh.data(),
                       {batch, kHid, kOut}, Activation::relu);
  ref::linear_backward(dh.data(), x.data(), w.fc1_weight, g.fc1_weight, g.fc1_bias, nullptr,
                       {batch, kIn, kHid}, Activation::identity);
  ref::sgd_step(params.data(), grads.data(), nullptr, ParamLayout::kCount, sgd, false);
  // Gradients: float sums of up to 256 terms in another order; within 1e-4 of the largest of the buffer
  // (a wrong element is off by its whole size). Parameters then differ by lr times that at most.
  float gmax = 0.0f;
  for (std::size_t i = 0; i < ParamLayout::kCount; ++i)
    gmax = std::max(gmax, std::fabs(grads[i]));
  Check c = compare(
      got_grads.data(), grads.data(), ParamLayout::kGradCount,
      [&](std::size_t i) {
        return i == ParamLayout::kLossSlot ? 1e-5 * std::fabs(grads[i]) + 1e-6 : 1e-4 * gmax + 1e-9;
      },
      "grads");
  return merge(c, compare(
                      got_params.data(), params.data(), ParamLayout::kCount,
                      [&](std::size_t) { return sgd.lr * (1e-4 * gmax) + 1e-7; }, "params"));
}

}  // namespace

void Runner::step_cases(int batch) {
  const std::string group = fmt::format("step-b{}", batch);
  const cudaStream_t s = stream_->get();
  for (const StepVariant& variant : kStepVariants) {
    const GemmImpl impl = variant.impl;
    const bool fused_head = variant.fused_head;
    const bool fused_step = variant.fused_step;
    const cuda::LaunchOrder order =
        variant.programmatic ? cuda::LaunchOrder::programmatic : cuda::LaunchOrder::serial;
    const std::string name = variant.name();
    const std::string id = group + "/step/" + name;
    if (!selected(id)) continue;
    if (variant.programmatic && !supports_programmatic_launch(device_)) {
      fmt::print("{}: skipped, the device is older than compute capability 9.0\n", id);
      continue;
    }
    if (variant.persistent && !supports_persistent_step(device_)) {
      fmt::print("{}: skipped, the device takes no cooperative launch here\n", id);
      continue;
    }
    const bool persistent = variant.persistent;
    auto data = training_set();
    struct StepBuffers {
      DeviceBuffer<float> params{ParamLayout::kCount}, grads{ParamLayout::kGradCount};
      DeviceBuffer<float> x, h, dh, logits, dlogits;
      DeviceBuffer<std::uint8_t> y;
      DeviceBuffer<int> first{1};  // the fused step's row offset: 0, the rows launch(0) takes, every time
    };
    auto buf = std::make_shared<StepBuffers>();
    buf->x = DeviceBuffer<float>(sz(batch) * kIn);
    buf->h = DeviceBuffer<float>(sz(batch) * kHid);
    buf->dh = DeviceBuffer<float>(sz(batch) * kHid);
    buf->logits = DeviceBuffer<float>(sz(batch) * kOut);
    buf->dlogits = DeviceBuffer<float>(sz(batch) * kOut);
    buf->y = DeviceBuffer<std::uint8_t>(sz(batch));
    CUDA_CHECK(cudaMemsetAsync(buf->first.data(), 0, sizeof(int), s));
    // nn.Linear's initialisation ranges: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
    const auto v = ParamViews<float>::of(buf->params.data());
    const float r1 = 1.0f / std::sqrt(static_cast<float>(kIn)),
                r2 = 1.0f / std::sqrt(static_cast<float>(kHid));
    fill_uniform(v.fc1_weight, sz(kHid) * kIn, seed_++, -r1, r1, s);
    fill_uniform(v.fc1_bias, kHid, seed_++, -r1, r1, s);
    fill_uniform(v.fc2_weight, sz(kOut) * kHid, seed_++, -r2, r2, s);
    fill_uniform(v.fc2_bias, kOut, seed_++, -r2, r2, s);
    const int steps = kTrainImages / batch;
    SgdConfig sgd;  // lr 0.01, no momentum: the reference program
    StepView view;  // the step's view of these buffers: no momentum, no loss record
    view.images = data->images.data();
    view.labels = data->labels.data();
    view.order = data->order.data();
    view.cursor = buf->first.data();
    view.params = buf->params.data();
    view.grads = buf->grads.data();
    view.x = buf->x.data();
    view.y = buf->y.data();
    view.h = buf->h.data();
    view.dh = buf->dh.data();
    view.logits = buf->logits.data();
    view.dlogits = buf->dlogits.data();
    int blocks = 0;  // the persistent kernel's grid: one block an SM
    CUDA_CHECK(cudaDeviceGetAttribute(&blocks, cudaDevAttrMultiProcessorCount, device_));
    StepKernels kernels;
    kernels.gemm = {impl, s, cublas_->get()};
    kernels.fused_head = fused_head;
    kernels.fused_step = fused_step;
    kernels.fused_order = order;
    kernels.persistent_blocks = blocks;
    // The training step's own launches (host/cuda/cuda_step.hpp), as CudaReplica makes them.
    auto step = std::make_shared<CudaStep>(view, kernels);
    auto launch = [buf, batch, steps, sgd, step, fused_step, persistent](long i) {
      if (persistent) {  // one step a launch, on the rows of step 0
        step->persistent_steps(batch, kGlobalBatch, sgd, /*first=*/0, /*steps=*/1);
        return;
      }
      if (fused_step) {
        // The rows of step 0 every time (the offset is not moved on): the time does not depend on them.
        step->fused_step(batch, kGlobalBatch, sgd, /*advance_cursor=*/false);
        return;
      }
      step->gradients(static_cast<int>(i % steps) * batch, batch, kGlobalBatch, /*from_cursor=*/false);
      step->sgd(sgd, /*first_step=*/false);
    };
    Bench b{group, "step", name, fmt::format("{} rows of {}", batch, kGlobalBatch)};
    b.work = step_work(batch, impl);
    if (fused_head) b.work.launches -= 5;  // the head's one launch for six
    if (fused_step) b.work.launches = persistent ? 1 : 3;
    b.validate = [data, buf, batch, sgd, launch, s] {
      return check_step(*data, *buf, batch, sgd, launch, s);
    };
    b.hot = launch;
    // Not the persistent kernel: a cooperative launch inside a stream capture is not taken everywhere,
    // and its many-steps-a-launch time is the epoch benchmark's "persistent+64".
    b.graph = !persistent;
    run(b);
    if (persistent && results_.back().check == "ok") persistent_phases(*step, batch, sgd);
  }
}

Work Runner::step_work(int batch, GemmImpl impl) {
  auto gemm = [](double m, double n, double k, double extra_floats) {
    return Work{2.0 * m * n * k, 4.0 * (m * k + k * n + m * n + extra_floats), 1};
  };
  const double b = batch;
  Work w{3.0 * b * kIn, 5.0 * b * kIn + 6.0 * b, 1};                    // gather
  w += gemm(b, kHid, kIn, kHid);                                        // fc1 forward, + bias
  w += gemm(b, kOut, kHid, kOut);                                       // fc2 forward, + bias
  w += Work{6.0 * b * kOut, 4.0 * (2 * b * kOut + 1) + b, 1};           // softmax cross-entropy
  w += gemm(kOut, kHid, b, 0);                                          // fc2 dW
  w += Work{b * kOut, 4.0 * (b * kOut + kOut), 1};                      // fc2 db
  w += gemm(b, kHid, kOut, b * kHid);                                   // fc2 dX, with the mask
  w += gemm(kHid, kIn, b, 0);                                           // fc1 dW
  w += Work{b * kHid, 4.0 * (b * kHid + kHid), 1};                      // fc1 db
  w += Work{2.0 * ParamLayout::kCount, 12.0 * ParamLayout::kCount, 1};  // SGD
  if (impl == GemmImpl::cublas) w.launches += 3;  // the separate epilogues of fc1 fwd, fc2 fwd and fc2 dX
  return w;
}

void Runner::persistent_phases(CudaStep& step, int batch, const SgdConfig& sgd) {
  constexpr int kPhaseSteps = 64;
  const cudaStream_t s = stream_->get();
  auto launch = [&](long long* timer) {
    step.persistent_steps(batch, kGlobalBatch, sgd, /*first=*/0, kPhaseSteps, timer);
  };
  if (opt_.check_only) {
    // One launch, with the phase timer (the longer path): no figure to report, and each launch of 64
    // steps costs an emulated device seconds.
    DeviceBuffer<long long> cycles(3);
    CUDA_CHECK(cudaMemsetAsync(cycles.data(), 0, cycles.bytes(), s));
    launch(cycles.data());
    CUDA_CHECK(cudaStreamSynchronize(s));
    fmt::print("  persistent, {} steps a launch, with the phase timer: launched once, untimed\n",
               kPhaseSteps);
    return;
  }
  const Stats per_step = per_operation(time_stream([&](long) { launch(nullptr); }, s, timing_), kPhaseSteps);
  DeviceBuffer<long long> cycles(3);
  CUDA_CHECK(cudaMemsetAsync(cycles.data(), 0, cycles.bytes(), s));
  launch(cycles.data());
  std::array<long long, 3> c{};
  CUDA_CHECK(cudaMemcpyAsync(c.data(), cycles.data(), cycles.bytes(), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  const double total = static_cast<double>(c[0] + c[1] + c[2]);
  constexpr const char* kPhases[] = {"gather + fc1 forward", "classifier head", "fc1 weight gradient + SGD"};
  std::string shares;
  nlohmann::json phases = nlohmann::json::array();
  for (int p = 0; p < 3; ++p) {
    const double share = total > 0 ? static_cast<double>(c[static_cast<std::size_t>(p)]) / total : 0.0;
    shares += fmt::format("{}{} {:.0f}% ({:.2f} us)", p ? ", " : "", kPhases[p], 100.0 * share,
                          share * per_step.median);
    phases.push_back({{"phase", kPhases[p]},
                      {"cycles_per_step", static_cast<double>(c[static_cast<std::size_t>(p)]) / kPhaseSteps},
                      {"share", share},
                      {"us_per_step", share * per_step.median}});
  }
  fmt::print(
      "  persistent, {} steps a launch: {:.2f} us a step on the device (p10 {:.2f}, p90 {:.2f}); "
      "each phase with its barrier: {}\n",
      kPhaseSteps, per_step.median, per_step.p10, per_step.p90, shares);
  persistent_phases_.push_back({{"steps_per_launch", kPhaseSteps},
                                {"blocks", step.kernels().persistent_blocks},
                                {"rows", batch},
                                {"step", to_json(per_step)},
                                {"phases", phases}});
}

}  // namespace mnistdp::bench
