#pragma once
// Programmatic dependent launch (launch_order.hpp), both sides of it; kernels/cuda/runtime/launch.cuh
// launches.
//
// A kernel that may be launched programmatically calls wait_for_previous_kernel() before its first access to
// global memory: from then on it sees everything the kernel before wrote, and that kernel has finished, so
// nothing this kernel writes can race with it. The wait is transitive (the kernel before waited for its own
// predecessor), and it returns at once in a kernel launched the serial way. allow_next_kernel() lets the
// next kernel's blocks be scheduled (they wait in turn), once every block of this one has called it or
// exited; it gives no memory guarantee of its own.
#include <cuda_runtime.h>

#include "kernels/cuda/runtime/launch.cuh"

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

}  // namespace mnistdp::cuda::detail
