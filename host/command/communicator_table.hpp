#pragma once
// The all-reduces a run can use, and which placement takes which: one row each. make_communicator
// (replica_setup.hpp) builds the row communicator_for() picks; a new communicator is a row here, its file and
// a case there.
#include <array>
#include <cstddef>

namespace mnistdp {

enum class CommunicatorKind { host_sum, process_group, nccl, same_device, nccl_ranks };

// Where the replicas are, as a communicator needs to know it.
struct ReplicaLayout {
  bool gpu = false;            // CUDA replicas (their gradient buffers in device memory)
  bool processes = false;      // several processes (mpirun, torchrun, srun), one group
  bool shared_device = false;  // several replicas on one GPU
};

struct CommunicatorEntry {
  CommunicatorKind kind;
  const char* name;         // as the documentation calls it
  const char* source;       // the file that implements it
  const char* description;  // what it does
  ReplicaLayout layout;     // the placement it serves
};

inline constexpr std::array kCommunicators{
    CommunicatorEntry{CommunicatorKind::host_sum,
                      "host sum",
                      "host/training/communicator.cpp",
                      "CPU replicas in one process: summed in replica order in host memory",
                      {false, false, false}},
    CommunicatorEntry{CommunicatorKind::process_group,
                      "process group",
                      "host/training/communicator.cpp",
                      "CPU replicas in several processes: the host sum, then the group's all-reduce "
                      "(MPI or TCP)",
                      {false, true, false}},
    CommunicatorEntry{CommunicatorKind::nccl,
                      "NCCL",
                      "host/cuda/cuda_communicators.cpp",
                      "one replica per GPU in one process: one grouped ncclAllReduce a step",
                      {true, false, false}},
    CommunicatorEntry{CommunicatorKind::same_device,
                      "same-device sum",
                      "host/cuda/cuda_communicators.cpp",
                      "several replicas on one GPU: a kernel sums in replica order, copies bring the sum "
                      "back",
                      {true, false, true}},
    CommunicatorEntry{CommunicatorKind::nccl_ranks,
                      "NCCL across processes",
                      "host/cuda/nccl_rank_communicator.cpp",
                      "one GPU per process: ncclCommInitRankConfig over the group, non-blocking, watched "
                      "with a timeout",
                      {true, true, false}},
};

static_assert(
    [] {
      for (std::size_t i = 0; i < kCommunicators.size(); ++i)
        if (static_cast<std::size_t>(kCommunicators[i].kind) != i) return false;
      return true;
    }(),
    "kCommunicators: one row per CommunicatorKind, in its order");

inline const CommunicatorEntry& communicator_entry(CommunicatorKind kind) {
  return kCommunicators[static_cast<std::size_t>(kind)];
}

// The row whose layout is `layout`; several processes each hold one GPU (a shared device counts only in one
// process).
constexpr CommunicatorKind communicator_for(ReplicaLayout layout) {
  if (!layout.gpu) return layout.processes ? CommunicatorKind::process_group : CommunicatorKind::host_sum;
  if (layout.processes) return CommunicatorKind::nccl_ranks;
  return layout.shared_device ? CommunicatorKind::same_device : CommunicatorKind::nccl;
}

}  // namespace mnistdp
