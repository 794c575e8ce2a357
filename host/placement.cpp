#include "host/placement.hpp"

#include <fmt/format.h>
#include <stdexcept>

#include "host/cpu_replica.hpp"
#include "kernels/linear.hpp"

#ifdef MNISTDP_WITH_CUDA
#include "host/cuda_communicators.hpp"
#include "host/cuda_replica.hpp"
#endif

namespace mnistdp {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

Placement cpu_placement(const TrainOptions& o) {
  Placement p;
  p.replicas = o.replicas > 0 ? o.replicas : 1;
  p.device_lines.push_back(
      fmt::format("cpu: {} replica{} on {} thread{}, OpenBLAS ({} kernels) with {} thread{} each", p.replicas,
                  p.replicas == 1 ? "" : "s", p.replicas, p.replicas == 1 ? "" : "s", blas::core_name(),
                  o.threads, o.threads == 1 ? "" : "s"));
  return p;
}

#ifdef MNISTDP_WITH_CUDA
Placement gpu_placement(const TrainOptions& o, const std::vector<CudaDeviceInfo>& visible) {
  std::vector<int> wanted = parse_device_list(o.devices);
  if (wanted.empty())
    for (const CudaDeviceInfo& d : visible)
      wanted.push_back(d.index);

  Placement p;
  p.gpu = true;
  for (int index : wanted) {
    const CudaDeviceInfo* info = nullptr;
    for (const CudaDeviceInfo& d : visible)
      if (d.index == index) info = &d;
    if (!info)
      throw UsageError(fmt::format("--devices: there is no CUDA device {}; this machine has {} (0 to {})",
                                   index, visible.size(), visible.size() - 1));
    p.device_lines.push_back(fmt::format(
        "cuda:{} {}: compute capability {}.{}, {} SMs, {:.1f} GiB ({:.1f} GiB free)", info->index, info->name,
        info->cc_major, info->cc_minor, info->sm_count, static_cast<double>(info->total_memory) / kGiB,
        static_cast<double>(info->free_memory) / kGiB));
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

Placement choose_placement(const TrainOptions& o) {
#ifdef MNISTDP_WITH_CUDA
  if (o.device == "cpu") return cpu_placement(o);
  std::string why_none;
  const std::vector<CudaDeviceInfo> visible = list_cuda_devices(why_none);
  if (!visible.empty()) return gpu_placement(o, visible);
  if (o.device == "cuda")
    throw std::runtime_error(fmt::format("--device cuda: no usable CUDA device ({})", why_none));
  fmt::print("no usable CUDA device ({}); training on the CPU\n", why_none);
  return cpu_placement(o);
#else
  if (o.device == "cuda")
    throw std::runtime_error(
        "--device cuda: this build of mnist-dp has no CUDA support (built with the cpu preset)");
  return cpu_placement(o);
#endif
}

std::vector<std::unique_ptr<Replica>> make_replicas(const TrainOptions& o, const DataSplits& data,
                                                    const Placement& placement) {
  std::vector<std::unique_ptr<Replica>> replicas;
#ifdef MNISTDP_WITH_CUDA
  if (placement.gpu) {
    const GemmImpl gemm = parse_gemm_impl(o.gemm);
    for (int device : placement.replica_devices)
      replicas.push_back(make_cuda_replica(data, device, gemm, o.cuda_graphs));
    return replicas;
  }
#endif
  // OpenBLAS's thread count is process-wide; each replica thread then uses that many.
  blas::set_threads(o.threads);
  for (int r = 0; r < placement.replicas; ++r)
    replicas.push_back(std::make_unique<CpuReplica>(data, r));
  return replicas;
}

std::unique_ptr<Communicator> make_communicator(
    [[maybe_unused]] const Placement& placement,
    [[maybe_unused]] const std::vector<std::unique_ptr<Replica>>& replicas) {
#ifdef MNISTDP_WITH_CUDA
  if (placement.gpu) {
    std::vector<Replica*> raw;
    for (const auto& r : replicas)
      raw.push_back(r.get());
    const bool one_device =
        placement.replicas > 1 && placement.replica_devices.front() == placement.replica_devices.back();
    return one_device ? make_same_device_communicator(raw) : make_nccl_communicator(raw);
  }
#endif
  return make_host_communicator();
}

}  // namespace mnistdp
