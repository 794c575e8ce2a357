#pragma once
// Kernels at the edges of an H200's launch resources (resource_kernels.cu), for the tests of the emulated
// launch's limits (test_launch_resources.cpp). Each call returns the runtime's status rather than throwing.
#include <cuda_runtime_api.h>

#include <cstddef>

namespace mnistdp::emu_test {

// A kernel with 40 KiB of static shared memory: out[0] = 3 from a block of 32 threads that also has
// `dynamic_bytes` (at least 128) of dynamic shared memory.
inline constexpr std::size_t kStaticSharedBytes = 40 * 1024;
cudaError_t launch_static_and_dynamic_shared(float* out, std::size_t dynamic_bytes, cudaStream_t stream);
cudaError_t static_and_dynamic_shared_attributes(cudaFuncAttributes* attributes);
// cudaFuncSetAttribute(that kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes).
cudaError_t raise_dynamic_shared_limit(int bytes);

// A kernel of __launch_bounds__(kBoundedThreads): out[i] = 1 for each of its `threads` threads.
inline constexpr int kBoundedThreads = 128;
cudaError_t launch_bounded(float* out, int threads, cudaStream_t stream);
cudaError_t bounded_attributes(cudaFuncAttributes* attributes);
cudaError_t bounded_occupancy(int* blocks, int threads);

}  // namespace mnistdp::emu_test
