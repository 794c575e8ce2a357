#pragma once
// The epoch's order of training rows, made on the device.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace mnistdp {
class ThrustScratch;
}

namespace mnistdp::cuda {

// order: [count] device memory <- the epoch's permutation of [0, count), equal to the bit to
// epoch_order(order, seed, epoch) on the host (host/model/init.hpp) for shuffle_seed =
// epoch_shuffle_seed(seed, epoch). keys: [count] device memory, overwritten. Queued on `stream` without a
// host wait and without a copy from the host; `scratch` holds Thrust's temporaries and serves this stream
// only.
void epoch_order(std::int32_t* order, std::uint64_t* keys, int count, std::uint64_t shuffle_seed,
                 ThrustScratch& scratch, cudaStream_t stream);

}  // namespace mnistdp::cuda
