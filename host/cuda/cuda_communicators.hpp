#pragma once
// All-reduces over CUDA replicas (host/cuda/cuda_replica.hpp). Each sums the replicas' flat gradient buffers,
// the loss slot included, and leaves the sum in every replica's buffer, ordered on each replica's stream
// after its compute_gradients launches and before its sgd_step launches: the host never waits for the device.
#include <chrono>
#include <memory>
#include <span>

#include "host/training/communicator.hpp"

namespace mnistdp {

// One replica per GPU, one process: ncclCommInitAll over the replicas' devices, and one grouped ncclAllReduce
// (sum, float) per step on the flat gradient buffer. Also valid for a single replica (world size 1), where
// the sum is the identity (the trainer takes a lone replica's steps through Replica::step_alone, without
// it). Every replica must be on a distinct CUDA device (Replica::device_place), and outlive the
// communicator.
std::unique_ptr<Communicator> make_nccl_communicator(std::span<Replica* const> replicas);

// Several replicas on one GPU (NCCL refuses two ranks on one device): the sum is taken by a kernel on replica
// 0's stream, after events from the other replicas' streams, in replica order (deterministic), then copied
// back to the other replicas' buffers on their streams. Every replica must be on the same CUDA device.
std::unique_ptr<Communicator> make_same_device_communicator(std::span<Replica* const> replicas);

}  // namespace mnistdp

namespace mnistdp {

// One process per GPU, several processes (mpirun, torchrun, srun): rank 0 makes NCCL's unique id, the process
// group carries it to the other ranks, and ncclCommInitRankConfig joins them. The communicator is
// non-blocking, so that no NCCL call can hang the host: every wait (the initialisation, await_completion)
// polls ncclCommGetAsyncError and gives up after `timeout`, aborting the communicator, which releases the
// stream. `replica` must be on a CUDA device (Replica::device_place), already current on the calling thread.
std::unique_ptr<Communicator> make_nccl_rank_communicator(Replica& replica, ProcessGroup& group,
                                                          std::chrono::milliseconds timeout);

}  // namespace mnistdp
