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
#include <stdexcept>
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

// The PTX architecture `kernel` was compiled for, as loaded on the current device. Programmatic launches
// rely on the wait above, which exists only in code for compute capability 9.0 and newer: a build for an
// older architecture, run on a newer GPU through the driver's compilation, would have none.
template <typename... Params>
int kernel_ptx_version(void (*kernel)(Params...)) {
  cudaFuncAttributes attributes{};
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  return attributes.ptxVersion;
}

// Kernel<<<grid, block, shared_bytes, stream>>>(args...), launched in `order`; checked, with the runtime's
// last error cleared on failure (as CUDA_CHECK_LAUNCH leaves it). A programmatic launch of a kernel built
// without the wait throws std::invalid_argument.
template <auto Kernel, typename... Args>
void launch(dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream, LaunchOrder order,
            Args&&... args) {
  if (order == LaunchOrder::programmatic) {
    // Asked once per kernel and process, not at every launch, on the device that launches it first: every
    // device is taken to load code of the same side of 9.0 (true of the default build, sm_90 only; a build
    // whose devices would load code from both sides, such as "80;100" on an H100 beside a B200, is not).
    static const int ptx_version = kernel_ptx_version(Kernel);
    if (ptx_version < 90) {
      throw std::invalid_argument(
          "programmatic launch of a kernel built only for compute capability below 9.0 "
          "(CMAKE_CUDA_ARCHITECTURES): it would not wait for the kernel before it");
    }
  }
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
  const cudaError_t status = cudaLaunchKernelEx(&config, Kernel, std::forward<Args>(args)...);
  if (status != cudaSuccess) static_cast<void>(cudaGetLastError());
  CUDA_CHECK(status);
}

}  // namespace mnistdp::cuda::detail
