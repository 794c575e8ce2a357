#pragma once
// The on-device sum behind the same-device communicator (host/cuda/cuda_communicators.hpp): several replicas
// on one GPU, their gradient buffers summed element by element in replica order, so that the result is the
// same to the bit as the host communicator's loop (host/training/communicator.cpp), sum = ((b0 + b1) + b2) +
// ..., and the same on every run. NCCL cannot do this on one GPU: it refuses two ranks on one device.
#include <cuda_runtime_api.h>

#include <cstddef>

namespace mnistdp::cuda {

// buffers: [replicas] pointers, in device memory, to [n] floats each (device memory on the stream's device)
//   -> out: [n], out[i] = ((buffers[0][i] + buffers[1][i]) + buffers[2][i]) + ... in replica order, each
//      addition rounded to nearest (no reassociation, no fused operations).
// out may be any one of the buffers (the sum in place: each element is read, from every buffer, by the thread
// that writes it, before it writes it); it must not overlap the others but at the same elements.
// replicas >= 1; n == 0 launches nothing.
void sum_in_order(const float* const* buffers, int replicas, float* out, std::size_t n, cudaStream_t stream);

}  // namespace mnistdp::cuda
