#include "host/command/placement.hpp"

#include <fmt/format.h>

#include <optional>
#include <stdexcept>

#include "host/command/progress.hpp"
#include "kernels/cpu/gemm.hpp"

#ifdef MNISTDP_WITH_CUDA
#include "host/cuda/cuda_replica.hpp"
#include "kernels/cuda/runtime/check.hpp"
#endif

namespace mnistdp {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

Placement cpu_placement(const TrainOptions& o, const LaunchInfo& launch) {
  Placement p;
  p.replicas = o.replicas > 0 ? o.replicas : 1;
  // Each replica runs on a thread of its own, which --threads - 1 more threads help.
  p.device_lines.push_back(fmt::format(
      "cpu: {}{}, {} thread{}{}, matrix products in {} (chosen by the CPU's features)",
      launch.multi_process() ? fmt::format("each of {} processes, ", launch.world_size) : "",
      p.replicas == 1 ? std::string("1 replica") : fmt::format("{} replicas", p.replicas), o.threads,
      o.threads == 1 ? "" : "s", p.replicas == 1 ? "" : " each", cpu::isa_name(cpu::best_isa())));
  return p;
}

#ifdef MNISTDP_WITH_CUDA
std::string device_line(const CudaDeviceInfo& info) {
  return fmt::format("cuda:{} {}: compute capability {}.{}, {} SMs, {:.1f} GiB ({:.1f} GiB free)", info.index,
                     info.name, info.cc_major, info.cc_minor, info.sm_count,
                     static_cast<double>(info.total_memory) / kGiB,
                     static_cast<double>(info.free_memory) / kGiB);
}

// One process of a multi-process run: the GPU of its local rank, made current first. nullopt when there is no
// usable GPU at all (why_none says why) and the device was not asked for.
std::optional<Placement> rank_gpu_placement(const TrainOptions& o, const LaunchInfo& launch,
                                            std::string& why_none) {
  int count = 0;
  if (const cudaError_t status = cudaGetDeviceCount(&count); status != cudaSuccess || count == 0) {
    why_none = status != cudaSuccess
                   ? fmt::format("cudaGetDeviceCount failed: {}", cudaGetErrorString(status))
                   : "no CUDA device is visible";
    static_cast<void>(cudaGetLastError());
    return std::nullopt;
  }
  const std::vector<int> listed = parse_device_list(o.devices);
  if (!listed.empty() && launch.local_rank >= static_cast<int>(listed.size()))
    throw UsageError(
        fmt::format("--devices {} lists {} GPUs, but this process is local rank {}: list one GPU "
                    "for every process on the node",
                    o.devices, listed.size(), launch.local_rank));
  // A launcher that gives each process its own GPU (Slurm's --gpus-per-task, a per-process
  // CUDA_VISIBLE_DEVICES) leaves each seeing one device, whatever its local rank.
  const int device = !listed.empty() ? listed[static_cast<std::size_t>(launch.local_rank)]
                     : count == 1    ? 0
                                     : launch.local_rank;
  if (device >= count)
    throw UsageError(
        fmt::format("local rank {} would take CUDA device {}, but this node has {} (0 to {}): start "
                    "at most one process per GPU on each node",
                    launch.local_rank, device, count, count - 1));
  if (o.replicas > 1)
    throw UsageError(
        fmt::format("--replicas {}: a multi-process GPU run has one replica per process (one "
                    "process per GPU)",
                    o.replicas));
  CudaDeviceInfo info;
  // Makes the device current: the first call that opens a context, on this process's GPU only.
  CUDA_CHECK(query_cuda_device(device, info));
  Placement p;
  p.gpu = true;
  p.replicas = 1;
  p.replica_devices = {device};
  p.device_lines.push_back(fmt::format("rank {} of {} (local rank {}): {}", launch.rank, launch.world_size,
                                       launch.local_rank, device_line(info)));
  return p;
}

// The GPUs of --devices (all visible ones by default), queried alone; nullopt, with why_none saying which
// device failed to answer, when one does.
std::optional<Placement> gpu_placement(const TrainOptions& o, int count, std::string& why_none) {
  const std::vector<int> listed = parse_device_list(o.devices);
  for (int index : listed)
    if (index >= count)
      throw UsageError(fmt::format("--devices: there is no CUDA device {}; this machine has {} (0 to {})",
                                   index, count, count - 1));
  const std::vector<CudaDeviceInfo> devices = list_cuda_devices(listed, why_none);
  if (devices.empty()) return std::nullopt;
  std::vector<int> wanted;
  Placement p;
  p.gpu = true;
  for (const CudaDeviceInfo& info : devices) {
    wanted.push_back(info.index);
    p.device_lines.push_back(device_line(info));
  }
  if (wanted.size() == 1) {
    // Several replicas on one GPU: the data-parallel path of the kernels, testable on a single GPU.
    p.replicas = o.replicas > 0 ? o.replicas : 1;
    p.replica_devices.assign(static_cast<std::size_t>(p.replicas), wanted.front());
  } else {
    if (o.replicas > 0 && o.replicas != static_cast<int>(wanted.size()))
      throw UsageError(
          fmt::format("--replicas {} with {} GPUs: several replicas per GPU work only on a single GPU "
                      "(pick one with --devices)",
                      o.replicas, wanted.size()));
    p.replicas = static_cast<int>(wanted.size());
    p.replica_devices = wanted;
  }
  return p;
}
#endif

}  // namespace

Placement choose_placement(const TrainOptions& o, const LaunchInfo& launch,
                           [[maybe_unused]] std::string_view activity) {
#ifdef MNISTDP_WITH_CUDA
  if (o.device == "cpu") return cpu_placement(o, launch);
#ifdef MNISTDP_CUDA_EMULATED
  // Emulated devices (docs/emulation.md) run the CUDA code for its checks, far slower than the CPU path:
  // only asked for by name.
  if (o.device != "cuda") return cpu_placement(o, launch);
#endif
  std::string why_none;
  if (launch.multi_process()) {
    if (std::optional<Placement> p = rank_gpu_placement(o, launch, why_none)) return *p;
  } else if (const int count = count_cuda_devices(why_none); count > 0) {
    if (std::optional<Placement> p = gpu_placement(o, count, why_none)) return *p;
  }
  if (o.device == "cuda")
    throw std::runtime_error(fmt::format("--device cuda: no usable CUDA device ({})", why_none));
  if (launch.rank == 0)
    console_print(stdout, "no usable CUDA device ({}); {} on the CPU\n", why_none, activity);
  return cpu_placement(o, launch);
#else
  if (o.device == "cuda")
    throw std::runtime_error(
        "--device cuda: this build of mnist-dp has no CUDA support (built with the cpu preset)");
  return cpu_placement(o, launch);
#endif
}

}  // namespace mnistdp
