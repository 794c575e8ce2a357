#pragma once
// The CUDA C++ device dialect for the host compiler: what nvcc makes of a .cu file's device code, given
// meaning on the CPU. Included before every .cu file of the emulated build (as nvcc includes its own runtime
// header), so that the same sources compile unchanged.
//
// Each emulated thread is a fiber; a block's threads share one OS thread, so `__shared__` variables, which
// are per block on a GPU, are thread_local here. The builtins that synchronise threads (barriers, warp
// collectives, grid.sync()) switch fibers; everything else is ordinary host code.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "emu/device_math.hpp"
#include "emu/runtime.hpp"
#include "emu/types.hpp"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define __CUDA_ARCH__ 900

#include "emu/builtins.hpp"

inline void __syncthreads() {
  ::mnistdp::emu::sync_threads();
}

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::mnistdp::emu::sync_warp(mask);
}

template <typename T>
inline T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = warpSize) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t) && std::is_trivially_copyable_v<T>);
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = ::mnistdp::emu::shuffle_xor(mask, bits, lane_mask, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

// expf, logf and erff as a GPU's, within CUDA's documented error bounds rather than glibc's correctly rounded
// results (emu/device_math.hpp). Macros, since the C library's functions cannot be overloaded; <cmath> is
// included above, so its own declarations are not renamed. The functions CUDA computes correctly rounded
// (sqrtf, fmaf, fmaxf, division) stay the C library's.
#define expf(x) ::mnistdp::emu::device_expf(x)
#define logf(x) ::mnistdp::emu::device_logf(x)
#define erff(x) ::mnistdp::emu::device_erff(x)

// Round-to-nearest arithmetic: exactly one IEEE operation each (the emulated build compiles with
// -ffp-contract=off, so nothing fuses them).
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fsub_rn(float a, float b) {
  return a - b;
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline float __fdiv_rn(float a, float b) {
  return a / b;
}

inline int min(int a, int b) {
  return a < b ? a : b;
}
inline int max(int a, int b) {
  return a > b ? a : b;
}
inline unsigned min(unsigned a, unsigned b) {
  return a < b ? a : b;
}
inline unsigned max(unsigned a, unsigned b) {
  return a > b ? a : b;
}
inline long min(long a, long b) {
  return a < b ? a : b;
}
inline long max(long a, long b) {
  return a > b ? a : b;
}

inline long long clock64() {
  return ::mnistdp::emu::clock_ticks();
}

// Blocks of a cooperative launch run on OS threads of their own: these are real atomics, relaxed as CUDA's
// are (they order no other access), made by the emulator so that the check of races between blocks sees
// what each reads and publishes (emu/src/checks/block_races.hpp).
namespace mnistdp::emu {
template <typename T>
inline T atomic_add_of(T* address, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = atomic_add(address, bits, sizeof(T));
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
}  // namespace mnistdp::emu
inline int atomicAdd(int* address, int value) {
  return ::mnistdp::emu::atomic_add_of(address, value);
}
inline unsigned atomicAdd(unsigned* address, unsigned value) {
  return ::mnistdp::emu::atomic_add_of(address, value);
}
inline unsigned long long atomicAdd(unsigned long long* address, unsigned long long value) {
  return ::mnistdp::emu::atomic_add_of(address, value);
}

// A fence of device scope (membar.gl, which the PTX ISA makes fence.sc.gpu): what the calling thread wrote
// before it is seen by a thread that has seen what it writes after it, once that thread has passed a fence
// of its own (the memory model's release and acquire patterns). The check of races between blocks counts on
// exactly that pattern and on nothing weaker.
inline void __threadfence() {
  ::mnistdp::emu::thread_fence();
}

inline void cudaGridDependencySynchronize() {
  ::mnistdp::emu::programmatic_wait();
}
inline void cudaTriggerProgrammaticLaunchCompletion() {
  ::mnistdp::emu::programmatic_trigger();
}
