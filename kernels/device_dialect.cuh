#pragma once
// The two corners of the device dialect that the host compiler of the emulated build (docs/emulation.md)
// cannot take as nvcc writes them: dynamic shared memory and a named barrier in inline PTX. Behind these,
// the GPU build compiles exactly what it compiled before.
#include <cuda_runtime.h>

// `MNISTDP_DYNAMIC_SHARED(float, s);` declares s, the block's dynamic shared memory (the launch's
// shared_bytes), as an array of float: `extern __shared__ float s[];`.
#if defined(MNISTDP_CUDA_EMULATED)
#define MNISTDP_DYNAMIC_SHARED(type, name) \
  type* const name = static_cast<type*>(::mnistdp::emu::dynamic_shared_memory())
#else
#define MNISTDP_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif

namespace mnistdp::cuda::detail {

// Barrier kId (1 to 15; 0 is __syncthreads()) of kThreads threads, a multiple of the warp size: each caller
// waits until kThreads threads of the block have arrived, and their shared-memory writes are then visible.
template <int kId, int kThreads>
__device__ __forceinline__ void named_barrier() {
  static_assert(kId >= 1 && kId <= 15 && kThreads % 32 == 0);
#if defined(MNISTDP_CUDA_EMULATED)
  ::mnistdp::emu::named_barrier(kId, kThreads);
#else
  asm volatile("bar.sync %0, %1;" ::"n"(kId), "n"(kThreads) : "memory");
#endif
}

}  // namespace mnistdp::cuda::detail
