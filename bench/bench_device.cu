// Device helpers of the GPU benchmarks (bench_device.hpp has the contracts).
#include <cooperative_groups.h>

#include <algorithm>

#include "bench/bench_device.hpp"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/launch.cuh"

namespace mnistdp::bench {
namespace {

constexpr int kThreads = 256;
constexpr std::size_t kMaxBlocks = 4096;  // grid-stride loops past this

__global__ void empty_kernel() {}

__global__ void __launch_bounds__(kThreads) grid_barriers_kernel(int barriers) {
  const cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  for (int i = 0; i < barriers; ++i)
    grid.sync();
}

// A 32-bit integer hash (the "lowbias32" finaliser): good enough to make benchmark inputs, cheap on the
// device.
__device__ __forceinline__ std::uint32_t hash32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

__device__ __forceinline__ std::uint32_t hash_index(std::uint32_t seed, std::size_t i) {
  return hash32(hash32(static_cast<std::uint32_t>(i)) ^ hash32(seed + static_cast<std::uint32_t>(i >> 32)));
}

__global__ void __launch_bounds__(kThreads)
    fill_uniform_kernel(float* __restrict__ p,  // [n]
                        std::size_t n, std::uint32_t seed, float lo, float hi) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(hash_index(seed, i) >> 8) * (1.0f / 16777216.0f);  // [0, 1)
    p[i] = lo + (hi - lo) * u;
  }
}

__global__ void __launch_bounds__(kThreads) fill_u8_kernel(std::uint8_t* __restrict__ p,  // [n]
                                                           std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<std::uint8_t>(hash_index(seed, i) >> 24);
}

__global__ void __launch_bounds__(kThreads) fill_value_kernel(float* __restrict__ p,  // [n]
                                                              std::size_t n, float value) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    p[i] = value;
}

__global__ void __launch_bounds__(kThreads)
    count_not_equal_kernel(const float* __restrict__ p,  // [n]
                           std::size_t n, float expect, unsigned long long* __restrict__ count) {
  unsigned long long mine = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    mine += p[i] != expect ? 1ULL : 0ULL;
  if (mine) atomicAdd(count, mine);
}

unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>(std::clamp<std::size_t>((n + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

}  // namespace

void launch_empty(cudaStream_t stream) {
  cuda::detail::launch<empty_kernel>(1, 1, 0, stream);
}

int launch_grid_barriers(int barriers, cudaStream_t stream) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  int cooperative = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
  if (!cooperative) CUDA_CHECK(cudaErrorNotSupported);
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cuda::detail::launch_cooperative<grid_barriers_kernel>(dim3(sms), dim3(kThreads), 0, stream, barriers);
  return sms;
}

void fill_uniform(float* p, std::size_t n, std::uint32_t seed, float lo, float hi, cudaStream_t stream) {
  if (n == 0) return;
  cuda::detail::launch<fill_uniform_kernel>(blocks_for(n), kThreads, 0, stream, p, n, seed, lo, hi);
}

void fill_uniform_u8(std::uint8_t* p, std::size_t n, std::uint32_t seed, cudaStream_t stream) {
  if (n == 0) return;
  cuda::detail::launch<fill_u8_kernel>(blocks_for(n), kThreads, 0, stream, p, n, seed);
}

void fill_value(float* p, std::size_t n, float value, cudaStream_t stream) {
  if (n == 0) return;
  cuda::detail::launch<fill_value_kernel>(blocks_for(n), kThreads, 0, stream, p, n, value);
}

void count_not_equal(const float* p, std::size_t n, float expect, unsigned long long* count,
                     cudaStream_t stream) {
  CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(unsigned long long), stream));
  if (n == 0) return;
  cuda::detail::launch<count_not_equal_kernel>(blocks_for(n), kThreads, 0, stream, p, n, expect, count);
}

}  // namespace mnistdp::bench
