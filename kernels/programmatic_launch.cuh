#pragma once
// Programmatic dependent launch (launch_order.hpp), both sides of it.
//
// A kernel that may be launched programmatically calls wait_for_previous_kernel() before its first access to
// global memory: from then on it sees everything the kernel before wrote, and that kernel has finished, so
// nothing this kernel writes can race with it. The wait is transitive (the kernel before waited for its own
// predecessor), and it returns at once in a kernel launched the serial way. allow_next_kernel() lets the
// next kernel's blocks be scheduled (they wait in turn), once every block of this one has called it or
// exited; it gives no memory guarantee of its own.
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "kernels/cuda_check.hpp"
#include "kernels/launch_order.hpp"

namespace mnistdp::cuda::detail {

__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();
#endif
}

__device__ __forceinline__ void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaTriggerProgrammaticLaunchCompletion();
#endif
}

// kernel<<<grid, block, shared_bytes, stream>>>(args...), launched in `order`; checked.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream,
            LaunchOrder order, Args&&... args) {
  cudaLaunchAttribute programmatic{};
  programmatic.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  programmatic.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = order == LaunchOrder::programmatic ? &programmatic : nullptr;
  config.numAttrs = order == LaunchOrder::programmatic ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace mnistdp::cuda::detail
