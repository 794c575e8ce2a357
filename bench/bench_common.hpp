#pragma once
// What the GPU benchmarks share: finding a usable GPU (or saying clearly why there is none), timing a
// sequence of launches with CUDA events on a stream or inside a CUDA graph, and describing the GPU for the
// JSON output; the summary of repeated timings, the date and the load come from bench_stats.hpp, included
// here. The method, in the manner of nccl-tests and llm.c:
//   warm-up launches; a calibration that picks how many launches one timing covers (so that a timing lasts
//   about target_ms); `repeats` timings, each one event pair around that many back-to-back launches; the
//   median per launch, with the 10th and 90th percentiles and the extremes as the spread.
#include <cuda_runtime_api.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_stats.hpp"

namespace mnistdp::bench {

// Exit status of a GPU benchmark that finds no usable GPU: the "skipped" of automake and ctest, as the
// project's GPU tests use it. Non-zero, so that a script that needed the numbers notices.
constexpr int kExitNoGpu = 77;

// Whether this build's CUDA devices are emulated on the CPU (the emu preset, docs/emulation.md).
bool devices_emulated();

// The number of CUDA devices this process can use; 0, with the reason in why_none, when there are none. Any
// error from the runtime counts as "no GPU": without a driver, cudaGetDeviceCount fails with
// cudaErrorInsufficientDriver, not cudaErrorNoDevice. Emulated devices count only with allow_emulated, which
// a --check-only run passes: it reports no time, and an emulated device's time is no GPU time.
int usable_devices(std::string& why_none, bool allow_emulated = false);

// Prints "<program>: no usable GPU (<why>)", that nothing was measured, and `hint` (may be empty) to stderr;
// returns kExitNoGpu.
int report_no_gpu(const char* program, const std::string& why_none, const std::string& hint);

struct TimingConfig {
  int repeats = 25;
  double target_ms = 2.0;  // how long one timing should last
  long max_launches = 1000;
  int warmup = 10;  // launches before calibration
};

// The timing of a --check-only run: no warm-up, one launch per timing, one timing. Every path a timed run
// takes (events, calibration, graph capture and replay) is taken, with as few launches as those paths allow,
// and the figures are thrown away.
constexpr TimingConfig kCheckOnlyTiming{1, 0.0, 1, 0};

// What the first line of a --check-only run says after the device: that nothing was timed, and on emulated
// devices that they are emulated.
std::string check_only_note();

// launch(i) enqueues one operation on `stream`; i counts up from 0 across warm-up and timings, so that the
// caller can rotate through buffer sets (i % sets). Nothing else may be queued on the stream meanwhile.
using LaunchFn = std::function<void(long)>;

// Back-to-back launches on the stream: the device time per launch, which for tiny kernels is the launch rate
// (the host enqueues slower than the device runs them), as in a training step.
Stats time_stream(const LaunchFn& launch, cudaStream_t stream, const TimingConfig& cfg);

// The same launches captured once into a CUDA graph of `launches` nodes, then the graph launched per timing:
// the per-kernel cost inside a graph, where the launch overhead is paid once per graph. launch(i) is called
// only during the capture (and the warm-up before it), with i < launches: it must not synchronise. The graph
// has two untimed launches first (fewer when cfg.warmup is under 2, as in kCheckOnlyTiming).
Stats time_graph(const LaunchFn& launch, cudaStream_t stream, const TimingConfig& cfg);

// "a,b,,c" -> {"a", "b", "c"}: a comma-separated list, empty items dropped.
std::vector<std::string> split_commas(const std::string& list);

// Describes device `device` (name, compute capability, SMs, L2, memory) and the CUDA driver and runtime.
nlohmann::json device_json(int device);
// The L2 size of `device`, in bytes.
std::size_t l2_bytes(int device);
// Whether `device` takes programmatic dependent launches (kernels/cuda/runtime/launch_order.hpp): compute
// capability 9.0+.
bool supports_programmatic_launch(int device);
// Whether `device` runs the persistent step (kernels/cuda/fused/persistent_step.hpp): cooperative launches,
// and a block of it resident an SM. Makes `device` current.
bool supports_persistent_step(int device);

}  // namespace mnistdp::bench
