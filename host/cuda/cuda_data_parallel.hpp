#pragma once
// nn.DataParallel's copies (host/training/data_parallel.hpp) between CUDA replicas: device 0's batch buffers
// and its copies of the other replicas' gradients live on replica 0's device; every copy is a
// cudaMemcpyPeerAsync (a device-to-device copy where two replicas share a GPU) on the stream of the replica
// that waits for it, after an event from the stream that wrote what it reads, so the host never waits.
#include <memory>
#include <span>

#include "host/training/data_parallel.hpp"

namespace mnistdp {

// Every replica must be on a CUDA device (Replica::device_place), and outlive the links.
std::unique_ptr<DataParallelLinks> make_cuda_data_parallel_links(std::span<Replica* const> replicas);

}  // namespace mnistdp
