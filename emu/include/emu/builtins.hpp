#pragma once
// What the device dialect (dialect.hpp) calls into: where the running emulated thread is, and the builtins
// that synchronise threads (emu/src/device/block.cpp). Each checks its use as the hardware requires it and
// stops the kernel with a message naming the kernel, the block and the thread when the use is wrong.
#include <cstddef>
#include <cstdint>

#include "emu/types.hpp"

// Where the running emulated thread is, as CUDA's built-in variables: the block's scheduler sets them on its
// OS thread before it resumes an emulated thread.
inline thread_local uint3 threadIdx{};
inline thread_local uint3 blockIdx{};
inline thread_local dim3 blockDim{};
inline thread_local dim3 gridDim{};
inline constexpr int warpSize = 32;

namespace mnistdp::emu {

void sync_threads();
void named_barrier(int id, int threads);
std::uint64_t shuffle_xor(unsigned mask, std::uint64_t value, int lane_mask, int width);
void sync_warp(unsigned mask);
void grid_sync();
// atomicAdd of a 4- or 8-byte integer at `address` (relaxed); returns the old value.
std::uint64_t atomic_add(void* address, std::uint64_t value, unsigned bytes);
void thread_fence();
void* dynamic_shared_memory();
// The running block's storage of the shared variable declared at `tag` (one per declaration): allocated,
// exactly `bytes` long and filled with NaN, by the first of the block's threads to reach the declaration.
void* shared_variable_storage(const void* tag, std::size_t bytes, std::size_t alignment);

template <typename T>
T& shared_variable(const void* tag) {
  return *static_cast<T*>(shared_variable_storage(tag, sizeof(T), alignof(T)));
}
void programmatic_wait();
void programmatic_trigger();
long long clock_ticks();

}  // namespace mnistdp::emu
