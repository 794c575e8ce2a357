// Runner: the ceilings every row is read against (cuBLAS SGEMM, a device copy, an empty launch, a grid
// barrier).
#include "bench/kernels/runner.hpp"

namespace mnistdp::bench {

void Runner::measure_ceilings() {
  const cudaStream_t s = stream_->get();
  const bool check_only = opt_.check_only;
  // Compute: a large cuBLAS SGEMM in pedantic fp32 (no TF32, no reduced-precision shortcut).
  {
    const int n = check_only ? kCheckOnlySgemm : (opt_.quick ? 4096 : 8192);
    DeviceBuffer<float> a(sz(n) * sz(n)), b(sz(n) * sz(n)), c(sz(n) * sz(n));
    fill_uniform(a.data(), a.size(), 1, -1.0f, 1.0f, s);
    fill_uniform(b.data(), b.size(), 2, -1.0f, 1.0f, s);
    CublasHandle pedantic(s);
    CUBLAS_CHECK(cublasSetMathMode(pedantic.get(), CUBLAS_PEDANTIC_MATH));
    const float one = 1.0f, zero = 0.0f;
    const TimingConfig cfg = check_only ? timing_ : TimingConfig{opt_.quick ? 3 : 7, 50.0, 1, 2};
    ceil_.sgemm_n = n;
    ceil_.sgemm = time_stream(
        [&](long) {
          CUBLAS_CHECK(cublasSgemm(pedantic.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.data(), n,
                                   b.data(), n, &zero, c.data(), n));
        },
        s, cfg);
    ceil_.sgemm_gflops = 2.0 * std::pow(static_cast<double>(n), 3) / (ceil_.sgemm.median * 1e3);
  }
  // Bandwidth: a large device-to-device copy; bytes read plus bytes written, as the rows count them.
  {
    const std::size_t bytes = check_only   ? kCheckOnlyCopyBytes
                              : opt_.quick ? (std::size_t{256} << 20)
                                           : (std::size_t{1} << 30);
    DeviceBuffer<std::uint8_t> from(bytes), to(bytes);
    CUDA_CHECK(cudaMemsetAsync(from.data(), 1, bytes, s));
    const TimingConfig cfg = check_only ? timing_ : TimingConfig{opt_.quick ? 3 : 10, 20.0, 4, 2};
    ceil_.copy_bytes = bytes;
    ceil_.copy = time_stream(
        [&](long) {
          CUDA_CHECK(cudaMemcpyAsync(to.data(), from.data(), bytes, cudaMemcpyDeviceToDevice, s));
        },
        s, cfg);
    ceil_.copy_gbs = 2.0 * static_cast<double>(bytes) / (ceil_.copy.median * 1e3);
  }
  // Latency: an empty kernel, back to back on a stream, inside a graph, and as a synchronous round trip.
  {
    TimingConfig cfg = timing_;
    if (!check_only) {
      cfg.max_launches = 1000;
      cfg.target_ms = 5.0;
    }
    ceil_.empty_stream = time_stream([&](long) { launch_empty(s); }, s, cfg);
    ceil_.empty_graph = time_graph([&](long) { launch_empty(s); }, s, cfg);
    std::vector<double> us;
    const int untimed = check_only ? 0 : 200;
    for (int i = 0; i < untimed + timing_.repeats * 20; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      launch_empty(s);
      CUDA_CHECK(cudaStreamSynchronize(s));
      const auto t1 = std::chrono::steady_clock::now();
      if (i >= untimed) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    ceil_.empty_sync = summarize(std::move(us), 1);
    // The launch's own cost is spread over the barriers: a few nanoseconds of each.
    if (!check_only) {
      cfg.max_launches = 20;
      cfg.target_ms = 20.0;
    }
    const int barriers = check_only ? kCheckOnlyGridBarriers : kGridBarriers;
    try {
      ceil_.grid_barrier =
          time_stream([&](long) { ceil_.grid_barrier_blocks = launch_grid_barriers(barriers, s); }, s, cfg);
      ceil_.grid_barrier = per_operation(ceil_.grid_barrier, barriers);
    } catch (const CudaError& e) {
      // Not every setup allows a cooperative launch (an MPS client, some virtual GPUs): say so, go on.
      static_cast<void>(cudaGetLastError());
      ceil_.grid_barrier_error = e.what();
    }
  }
}

void Runner::print_ceilings() const {
  if (opt_.check_only) {
    fmt::print(
        "Ceilings: launched untimed at small sizes (cublasSgemm {0}x{0}x{0}, a copy of {1} KiB, an empty "
        "kernel, {2} grid-wide barriers){3}.\n\n",
        ceil_.sgemm_n, ceil_.copy_bytes >> 10, kCheckOnlyGridBarriers,
        ceil_.grid_barrier_error.empty() ? "" : "; the barrier's launch failed: " + ceil_.grid_barrier_error);
    return;
  }
  fmt::print("Ceilings, measured in this run:\n");
  fmt::print("  compute    cublasSgemm {0}x{0}x{0}, fp32 pedantic (no TF32): {1:.1f} GFLOP/s ({2:.2f} ms)\n",
             ceil_.sgemm_n, ceil_.sgemm_gflops, ceil_.sgemm.median / 1e3);
  fmt::print("  bandwidth  cudaMemcpy device to device, {} MiB: {:.1f} GB/s read + write ({:.3f} ms)\n",
             ceil_.copy_bytes >> 20, ceil_.copy_gbs, ceil_.copy.median / 1e3);
  fmt::print(
      "  latency    empty kernel: {:.2f} us per launch on a stream, {:.2f} us per node in a graph, "
      "{:.2f} us launch + synchronize\n",
      ceil_.empty_stream.median, ceil_.empty_graph.median, ceil_.empty_sync.median);
  if (ceil_.grid_barrier_error.empty()) {
    fmt::print(
        "  barrier    grid-wide, {} blocks of 256 (one per SM), in one cooperative launch: {:.3f} us\n\n",
        ceil_.grid_barrier_blocks, ceil_.grid_barrier.median);
  } else {
    fmt::print("  barrier    not measured: {}\n\n", ceil_.grid_barrier_error);
  }
}

}  // namespace mnistdp::bench
