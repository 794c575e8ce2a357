#include "bench/bench_common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "kernels/cuda/fused/persistent_step.hpp"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/graph.hpp"
#include "kernels/cuda/runtime/memory.hpp"

namespace mnistdp::bench {

bool devices_emulated() {
#if defined(MNISTDP_CUDA_EMULATED)
  return true;
#else
  return false;
#endif
}

int usable_devices(std::string& why_none, bool allow_emulated) {
  if (devices_emulated() && !allow_emulated) {
    // An emulated device's time is the emulator's on the CPU: never to be reported as a GPU's.
    why_none =
        "this build's CUDA devices are emulated on the CPU (docs/emulation.md), and their times are no GPU "
        "times";
    return 0;
  }
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    why_none =
        fmt::format("cudaGetDeviceCount: {}: {}", cudaGetErrorName(status), cudaGetErrorString(status));
    static_cast<void>(cudaGetLastError());  // clear it, so that it is not reported again by a later call
    return 0;
  }
  if (count == 0) why_none = "the CUDA runtime lists no device";
  return count;
}

int report_no_gpu(const char* program, const std::string& why_none, const std::string& hint) {
  std::fprintf(stderr,
               "%s: no usable GPU (%s).\n%s: this benchmark times CUDA code and needs a GPU; nothing was "
               "measured.%s%s\n",
               program, why_none.c_str(), program, hint.empty() ? "" : " ", hint.c_str());
  return kExitNoGpu;
}

std::string check_only_note() {
  std::string note =
      "check only: every result checked against its reference, each operation launched a few times, "
      "NOTHING TIMED";
  if (devices_emulated())
    note +=
        "; the CUDA devices are EMULATED on the CPU (docs/emulation.md): this says nothing of a GPU's speed";
  return note;
}

namespace {

// Launches per timing: enough for a timing to last about cfg.target_ms, at least 1.
long calibrate(const LaunchFn& launch, cudaStream_t stream, const TimingConfig& cfg, long& next) {
  Event start, stop;
  for (int i = 0; i < cfg.warmup; ++i)
    launch(next++);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  // Time a few launches, growing the count until the timing is long enough to trust (or one launch is slow).
  long probe = 1;
  double per_launch_ms = 0.0;
  for (;;) {
    start.record(stream);
    for (long i = 0; i < probe; ++i)
      launch(next++);
    stop.record(stream);
    stop.synchronize();
    const double ms = stop.elapsed_ms_since(start);
    per_launch_ms = ms / static_cast<double>(probe);
    if (ms >= 0.2 * cfg.target_ms || probe >= cfg.max_launches) break;
    probe *= 4;
  }
  const double want = cfg.target_ms / std::max(per_launch_ms, 1e-6);
  return std::clamp(static_cast<long>(want), 1L, cfg.max_launches);
}

}  // namespace

Stats time_stream(const LaunchFn& launch, cudaStream_t stream, const TimingConfig& cfg) {
  long next = 0;
  const long n = calibrate(launch, stream, cfg, next);
  Event start, stop;
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(cfg.repeats));
  for (int r = 0; r < cfg.repeats; ++r) {
    start.record(stream);
    for (long i = 0; i < n; ++i)
      launch(next++);
    stop.record(stream);
    stop.synchronize();
    us.push_back(1e3 * stop.elapsed_ms_since(start) / static_cast<double>(n));
  }
  return summarize(std::move(us), n);
}

Stats time_graph(const LaunchFn& launch, cudaStream_t stream, const TimingConfig& cfg) {
  long next = 0;
  const long n = calibrate(launch, stream, cfg, next);
  const CudaGraph captured = capture_graph(stream, [&] {
    for (long i = 0; i < n; ++i)
      launch(i);
  });
  const CudaGraphExec graph(captured);
  graph.upload(stream);
  // Warm-up: the first launch of a graph pays for its setup. A check-only run (cfg.warmup 0) times nothing,
  // and launches the graph once.
  for (int i = 0; i < std::min(2, cfg.warmup); ++i)
    graph.launch(stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  Event start, stop;
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(cfg.repeats));
  for (int r = 0; r < cfg.repeats; ++r) {
    start.record(stream);
    graph.launch(stream);
    stop.record(stream);
    stop.synchronize();
    us.push_back(1e3 * stop.elapsed_ms_since(start) / static_cast<double>(n));
  }
  return summarize(std::move(us), n);
}

std::size_t l2_bytes(int device) {
  int l2 = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  return static_cast<std::size_t>(l2);
}

std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    if (comma > start) items.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}

bool supports_programmatic_launch(int device) {
  int major = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 9;
}

bool supports_persistent_step(int device) {
  CUDA_CHECK(cudaSetDevice(device));
  return cuda::persistent_step_max_blocks_per_sm() >= 1;
}

nlohmann::json device_json(int device) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int driver = 0;
  int runtime = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  int clock_khz = 0;
  int mem_clock_khz = 0;
  // Attributes rather than cudaDeviceProp fields: CUDA 13 removed the clock fields from the struct, and may
  // stop reporting these too. Informational only: a failure leaves 0 (and is cleared) rather than ending the
  // run.
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess)
    static_cast<void>(cudaGetLastError());
  char bus_id[32] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device));
  auto version = [](int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); };
  return {{"index", device},
          {"name", prop.name},
          {"pci_bus_id", bus_id},
          {"compute_capability", fmt::format("{}.{}", prop.major, prop.minor)},
          {"sm_count", prop.multiProcessorCount},
          {"l2_bytes", l2_bytes(device)},
          {"memory_bytes", prop.totalGlobalMem},
          {"sm_clock_mhz", clock_khz / 1000},
          {"memory_clock_mhz", mem_clock_khz / 1000},
          {"cuda_driver_api", version(driver)},
          {"cuda_runtime", version(runtime)}};
}

}  // namespace mnistdp::bench
