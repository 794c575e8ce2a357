#include "host/command/replica_setup.hpp"

#include <stdexcept>

#include "host/command/communicator_table.hpp"
#include "host/cpu/cpu_replica.hpp"

#ifdef MNISTDP_WITH_CUDA
#include "host/cuda/cuda_communicators.hpp"
#include "host/cuda/cuda_data_parallel.hpp"
#include "host/cuda/cuda_replica.hpp"
#include "kernels/cuda/gemm/gemm_version.hpp"
#endif

namespace mnistdp {

std::vector<std::unique_ptr<Replica>> make_replicas(const TrainOptions& o, Activation activation,
                                                    const DataSplits& data, const Placement& placement,
                                                    [[maybe_unused]] int processes) {
  std::vector<std::unique_ptr<Replica>> replicas;
#ifdef MNISTDP_WITH_CUDA
  if (placement.gpu) {
    CudaStepOptions step;
    step.gemm = parse_gemm_impl(o.gemm);
    const bool fused_step = o.fused_step || o.pdl || o.persistent;
    step.cuda_graphs = o.cuda_graphs || fused_step || o.steps_per_graph > 1;
    step.fused_head = o.fused_head || fused_step;
    step.fused_step = fused_step;
    step.programmatic_launch = o.pdl;
    step.persistent = o.persistent;
    step.steps_per_graph = o.steps_per_graph;
    step.tf32 = o.tf32;
    step.alone = placement.replicas == 1 && processes == 1;
    step.activation = activation;
    for (int device : placement.replica_devices)
      replicas.push_back(make_cuda_replica(data, device, step));
    return replicas;
  }
#endif
  for (int r = 0; r < placement.replicas; ++r)
    replicas.push_back(std::make_unique<CpuReplica>(data, r, o.threads, activation));
  return replicas;
}

std::unique_ptr<Communicator> make_communicator(
    [[maybe_unused]] const Placement& placement,
    [[maybe_unused]] const std::vector<std::unique_ptr<Replica>>& replicas, ProcessGroup* group,
    [[maybe_unused]] std::chrono::milliseconds timeout) {
  ReplicaLayout layout;
  layout.gpu = placement.gpu;
  layout.processes = group != nullptr;
  layout.shared_device = placement.gpu && placement.replicas > 1 &&
                         placement.replica_devices.front() == placement.replica_devices.back();
  [[maybe_unused]] std::vector<Replica*> raw;
  for (const auto& r : replicas)
    raw.push_back(r.get());
  switch (communicator_for(layout)) {
    case CommunicatorKind::host_sum:
      return make_host_communicator();
    case CommunicatorKind::process_group:
      return make_process_group_communicator(*group);
#ifdef MNISTDP_WITH_CUDA
    case CommunicatorKind::nccl:
      return make_nccl_communicator(raw);
    case CommunicatorKind::same_device:
      return make_same_device_communicator(raw);
    case CommunicatorKind::nccl_ranks:
      return make_nccl_rank_communicator(*replicas.front(), *group, timeout);
#else
    case CommunicatorKind::nccl:
    case CommunicatorKind::same_device:
    case CommunicatorKind::nccl_ranks:
      break;
#endif
  }
  throw std::logic_error("make_communicator: GPU replicas in a build without CUDA");
}

std::unique_ptr<DataParallelLinks> make_data_parallel_links(
    const Placement& placement, const std::vector<std::unique_ptr<Replica>>& replicas) {
  std::vector<Replica*> raw;
  for (const auto& r : replicas)
    raw.push_back(r.get());
#ifdef MNISTDP_WITH_CUDA
  if (placement.gpu) return make_cuda_data_parallel_links(raw);
#else
  if (placement.gpu) throw std::logic_error("make_data_parallel_links: GPU replicas in a build without CUDA");
#endif
  return make_host_data_parallel_links(raw);
}

}  // namespace mnistdp
