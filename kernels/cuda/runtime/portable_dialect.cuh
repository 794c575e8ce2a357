#pragma once
// The corners of the device dialect that the emulated build (docs/emulation.md) needs spelled through the
// project's own names: shared variables, dynamic shared memory and a named barrier in inline PTX. Behind
// these, the GPU build compiles exactly what it compiled before.
#include <cuda_runtime.h>

// `MNISTDP_SHARED(Type, name);` declares name, a variable of Type in the block's shared memory: `__shared__
// Type name;` (Type an alias where it is an array). In the emulated build each is a block's own heap block of
// exactly its size, filled with NaN when the block starts, so that a read of a slot nobody wrote, or past the
// end (under AddressSanitizer), shows.
#if defined(MNISTDP_CUDA_EMULATED)
#define MNISTDP_SHARED(type, name)                 \
  static constexpr char mnistdp_shared_##name = 0; \
  type& name = ::mnistdp::emu::shared_variable<type>(&mnistdp_shared_##name)
#else
#define MNISTDP_SHARED(type, name) __shared__ type name
#endif

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
