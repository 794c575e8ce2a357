// Runner: the GEMM cases in every version, and the other kernels of a step, at each per-replica batch.
#include "bench/kernels/runner.hpp"

namespace mnistdp::bench {

void Runner::gemm_case(const GemmCase& g) {
  std::vector<ImplChoice> chosen;
  for (const ImplChoice& c : impls_for(g))
    if (selected(g.group + "/" + g.op + "/" + c.name)) chosen.push_back(c);
  if (chosen.empty()) return;
  auto buf = std::make_shared<GemmBuffers>(g, l2_, true, max_sets());
  const cudaStream_t s = stream_->get();
  fill_uniform(buf->slab.data(), buf->slab.size(), seed_++, -1.0f, 1.0f, s);
  CUDA_CHECK(cudaStreamSynchronize(s));
  auto check = std::make_shared<GemmCheck>(g, *buf);
  const cublasHandle_t handle = cublas_->get();
  for (const ImplChoice& c : chosen) {
    Bench b(g.group, g.op, c.name, g.shape());
    b.work = g.work(c.epilogue);
    b.work.launches = c.impl == GemmImpl::cublas && c.epilogue && g.epilogue() ? 2 : 1;
    auto launch = [buf, g, c, handle, s](int set) {
      const cuda::GemmProblem p = buf->problem(g, set, c.epilogue);
      if (c.impl == GemmImpl::cublas)
        cuda::gemm_cublas(p, handle, s);
      else
        cuda::gemm(p, c.impl, s, handle);
    };
    b.validate = [buf, g, c, check, launch, s] {
      // Poison C first, so that a version that leaves elements unwritten cannot pass on an earlier result.
      CUDA_CHECK(cudaMemsetAsync(buf->slab.data() + buf->c, 0xff, g.c_count() * sizeof(float), s));
      launch(0);
      CUDA_CHECK(cudaStreamSynchronize(s));
      return (*check)(buf->slab.data() + buf->c, c.epilogue);
    };
    if (g.timed_hot) b.hot = [launch](long) { launch(0); };
    if (buf->sets > 1 || !g.timed_hot) {
      const int sets = buf->sets;
      b.cold = [launch, sets](long i) { launch(static_cast<int>(i % sets)); };
    }
    b.sets = buf->sets;
    b.graph = g.timed_graph;
    run(b);
  }
}

void Runner::kernel_cases(int batch) {
  const std::string group = fmt::format("train-b{}", batch);
  const cudaStream_t s = stream_->get();

  // Bias gradients: column sums of dy (fc1: [batch, 256], fc2: [batch, 10]).
  for (const auto& [op, cols] : {std::pair{"fc1.db", kHid}, std::pair{"fc2.db", kOut}}) {
    const std::string id = group + "/" + op + "/column_sums";
    if (!selected(id)) continue;
    const std::size_t set_floats = align_up(sz(batch) * sz(cols)) + align_up(sz(cols));
    const int sets = rotation_sets(set_floats * 4);
    auto slab = std::make_shared<DeviceBuffer<float>>(set_floats * sz(sets));
    fill_uniform(slab->data(), slab->size(), seed_++, -1.0f, 1.0f, s);
    const std::size_t out_at = align_up(sz(batch) * sz(cols));
    auto launch = [slab, set_floats, out_at, batch, cols = cols, s](long i) {
      float* base = slab->data() + set_floats * sz(i);
      cuda::column_sums(base, base + out_at, batch, cols, s);
    };
    Bench b{group, op, "column_sums", fmt::format("{}x{} -> {}", batch, cols, cols)};
    b.work = {static_cast<double>(batch) * cols, 4.0 * (batch * cols + cols), 1};
    b.validate = [slab, out_at, batch, cols = cols, launch, s] {
      launch(0);
      CUDA_CHECK(cudaStreamSynchronize(s));
      const auto m = to_host(slab->data(), sz(batch) * sz(cols));
      const auto got = to_host(slab->data() + out_at, sz(cols));
      std::vector<float> want(sz(cols), 0.0f), abs_sum(sz(cols), 0.0f);
      for (int r = 0; r < batch; ++r)
        for (int c = 0; c < cols; ++c) {
          want[sz(c)] += m[sz(r) * sz(cols) + sz(c)];
          abs_sum[sz(c)] += std::fabs(m[sz(r) * sz(cols) + sz(c)]);
        }
      const double eps = std::numeric_limits<float>::epsilon();
      return compare(
          got.data(), want.data(), sz(cols), [&](std::size_t c) { return 2.0 * batch * eps * abs_sum[c]; },
          "db");
    };
    with_rotation(b, launch, sets);
    run(b);
  }

  // Softmax cross-entropy, forward and backward fused: logits [batch, 10] -> dlogits, loss sum.
  {
    const std::string id = group + "/softmax_xent/fused";
    if (selected(id)) {
      const std::size_t set_floats = 2 * align_up(sz(batch) * kOut) + kAlign;
      const int sets = rotation_sets(set_floats * 4);
      auto slab = std::make_shared<DeviceBuffer<float>>(set_floats * sz(sets));
      fill_uniform(slab->data(), slab->size(), seed_++, -4.0f, 4.0f, s);
      auto labels = std::make_shared<DeviceBuffer<std::uint8_t>>(sz(batch));
      std::vector<std::uint8_t> host_labels = random_labels(batch);
      to_device(labels->data(), host_labels);
      const std::size_t d_at = align_up(sz(batch) * kOut), loss_at = 2 * d_at;
      auto launch = [slab, labels, set_floats, d_at, loss_at, batch, s](long i) {
        float* base = slab->data() + set_floats * sz(i);
        cuda::softmax_xent(base, labels->data(), base + d_at, base + loss_at, batch, kOut,
                           1.0f / kGlobalBatch, s);
      };
      Bench b{group, "softmax_xent", "fused", fmt::format("{}x{}", batch, kOut)};
      // Per element: a compare for the max, a subtraction, an exp, an add, a division, a scale.
      b.work = {6.0 * batch * kOut, 4.0 * (2 * batch * kOut + 1) + batch, 1};
      b.validate = [slab, host_labels, d_at, loss_at, batch, launch, s] {
        launch(0);
        CUDA_CHECK(cudaStreamSynchronize(s));
        const auto logits = to_host(slab->data(), sz(batch) * kOut);
        const auto got = to_host(slab->data() + d_at, sz(batch) * kOut);
        const auto loss = to_host(slab->data() + loss_at, 1);
        std::vector<float> want(sz(batch) * kOut);
        const float want_loss = ref::softmax_xent(logits.data(), host_labels.data(), want.data(), batch, kOut,
                                                  1.0f / kGlobalBatch);
        Check c = compare(
            got.data(), want.data(), want.size(), [](std::size_t) { return 1e-5 / kGlobalBatch; }, "dlogits");
        return merge(c, compare(
                            loss.data(), &want_loss, 1,
                            [&](std::size_t) { return 1e-5 * std::fabs(want_loss) + 1e-6; }, "loss_sum"));
      };
      with_rotation(b, launch, sets);
      run(b);
    }
  }

  // Accuracy: argmax per row, marked 1 where it equals the label (Thrust's transform; the count over the
  // whole test set is one reduction at the end of an evaluation).
  {
    const std::string id = group + "/mark_correct/argmax";
    if (selected(id)) {
      const std::size_t set_floats = align_up(sz(batch) * kOut) + kAlign;
      const int sets = rotation_sets(set_floats * 4);
      auto slab = std::make_shared<DeviceBuffer<float>>(set_floats * sz(sets));
      fill_uniform(slab->data(), slab->size(), seed_++, -4.0f, 4.0f, s);
      auto labels = std::make_shared<DeviceBuffer<std::uint8_t>>(sz(batch));
      auto marks = std::make_shared<DeviceBuffer<std::uint8_t>>(sz(batch) * sz(sets));
      auto scratch = std::make_shared<ThrustScratch>();
      std::vector<std::uint8_t> host_labels = random_labels(batch);
      to_device(labels->data(), host_labels);
      auto launch = [slab, labels, marks, scratch, set_floats, batch, s](long i) {
        cuda::mark_correct(slab->data() + set_floats * sz(i), labels->data(),
                           marks->data() + sz(batch) * sz(i), batch, kOut, *scratch, s);
      };
      Bench b{group, "mark_correct", "argmax", fmt::format("{}x{}", batch, kOut)};
      b.work = {1.0 * batch * kOut, 4.0 * batch * kOut + 2.0 * batch, 1};
      b.validate = [slab, marks, host_labels, batch, launch, s] {
        launch(0);
        CUDA_CHECK(cudaStreamSynchronize(s));
        const auto logits = to_host(slab->data(), sz(batch) * kOut);
        const auto row_marks = to_host(marks->data(), sz(batch));
        const float got = static_cast<float>(std::count(row_marks.begin(), row_marks.end(), 1));
        const float want =
            static_cast<float>(ref::count_correct(logits.data(), host_labels.data(), batch, kOut));
        return compare(
            &got, &want, 1, [](std::size_t) { return 0.0; }, "correct");
      };
      with_rotation(b, launch, sets);
      run(b);
    }
  }

  // The batch: gather rows of the uint8 training set by index and normalise them.
  {
    const std::string id = group + "/gather/normalize";
    if (selected(id)) {
      auto data = training_set();
      const int steps = kTrainImages / batch;
      auto launch = [data, batch, steps, s](long i) {
        cuda::gather_normalize(data->images.data(), data->labels.data(),
                               data->order.data() + sz(i % steps) * sz(batch), data->x.data(), data->y.data(),
                               batch, kIn, s);
      };
      Bench b{group, "gather", "normalize", fmt::format("{} of {} rows x {} u8", batch, kTrainImages, kIn)};
      b.work = {3.0 * batch * kIn, 5.0 * batch * kIn + 4.0 * batch + 2.0 * batch, 1};
      b.validate = [data, batch, launch, s] {
        launch(0);
        CUDA_CHECK(cudaStreamSynchronize(s));
        const auto x = to_host(data->x.data(), sz(batch) * kIn);
        const auto y = to_host(data->y.data(), sz(batch));
        std::vector<float> want_x(sz(batch) * kIn);
        std::vector<std::uint8_t> want_y(sz(batch));
        ref::gather_normalize(data->host_images.data(), data->host_labels.data(), data->host_order.data(),
                              want_x.data(), want_y.data(), batch, kIn);
        Check c = compare(
            x.data(), want_x.data(), x.size(), [](std::size_t) { return 0.0; }, "x");
        const std::vector<float> yf(y.begin(), y.end()), want_yf(want_y.begin(), want_y.end());
        return merge(c, compare(
                            yf.data(), want_yf.data(), yf.size(), [](std::size_t) { return 0.0; }, "y"));
      };
      // Each launch gathers the next batch of the epoch's order: the rows differ launch to launch, as in
      // training, so there is no separate cold mode.
      b.hot = launch;
      b.graph = true;
      run(b);
    }
  }
}

void Runner::sgd_cases() {
  const cudaStream_t s = stream_->get();
  for (const bool momentum : {false, true}) {
    const std::string impl = momentum ? "momentum0.9" : "plain";
    const std::string id = "kernel/sgd/" + impl;
    if (!selected(id)) continue;
    constexpr std::size_t n = ParamLayout::kCount;
    const std::size_t set_floats = 3 * align_up(n);  // params, grads, momentum
    const int sets = rotation_sets(set_floats * 4);
    auto slab = std::make_shared<DeviceBuffer<float>>(set_floats * sz(sets));
    fill_uniform(slab->data(), slab->size(), seed_++, -0.05f, 0.05f, s);
    SgdConfig cfg;
    cfg.momentum = momentum ? 0.9f : 0.0f;
    const std::size_t g_at = align_up(n), m_at = 2 * align_up(n);
    auto launch = [slab, set_floats, g_at, m_at, cfg, momentum, s](long i) {
      float* base = slab->data() + set_floats * sz(i);
      cuda::sgd_step(base, base + g_at, momentum ? base + m_at : nullptr, n, cfg, false, s);
    };
    Bench b{"kernel", "sgd", impl, fmt::format("{} params", n)};
    b.work = momentum ? Work{4.0 * static_cast<double>(n), 20.0 * static_cast<double>(n), 1}
                      : Work{2.0 * static_cast<double>(n), 12.0 * static_cast<double>(n), 1};
    b.validate = [slab, g_at, m_at, cfg, momentum, launch, s] {
      auto p = to_host(slab->data(), n);
      const auto g = to_host(slab->data() + g_at, n);
      auto m = to_host(slab->data() + m_at, n);
      launch(0);
      CUDA_CHECK(cudaStreamSynchronize(s));
      ref::sgd_step(p.data(), g.data(), momentum ? m.data() : nullptr, n, cfg, false);
      const auto got = to_host(slab->data(), n);
      // The kernel avoids contracting into multiply-adds, as the reference does: equal to the bit.
      Check c = compare(
          got.data(), p.data(), n, [](std::size_t) { return 0.0; }, "params");
      if (momentum) {
        const auto got_m = to_host(slab->data() + m_at, n);
        c = merge(c, compare(
                         got_m.data(), m.data(), n, [](std::size_t) { return 0.0; }, "momentum"));
      }
      return c;
    };
    with_rotation(b, launch, sets);
    run(b);
  }
}

}  // namespace mnistdp::bench
