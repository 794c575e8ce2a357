// The kernels of resource_kernels.hpp: one past 48 KiB of shared memory with its dynamic part, one with
// launch bounds.
#include "tests/emu/resource_kernels.hpp"

#include "kernels/cuda/runtime/launch.cuh"
#include "kernels/cuda/runtime/portable_dialect.cuh"

namespace mnistdp::emu_test {
namespace {

constexpr int kStaticFloats = static_cast<int>(kStaticSharedBytes / sizeof(float));
constexpr int kSharedThreads = 32;

__global__ void __launch_bounds__(kSharedThreads)
    static_and_dynamic_shared_kernel(float* __restrict__ out) {  // [1]
  using Tile = float[kStaticFloats];
  MNISTDP_SHARED(Tile, tile);
  MNISTDP_DYNAMIC_SHARED(float, extra);  // [at least kSharedThreads]
  for (int i = static_cast<int>(threadIdx.x); i < kStaticFloats; i += kSharedThreads)
    tile[i] = 1.0f;
  extra[threadIdx.x] = 2.0f;
  __syncthreads();
  if (threadIdx.x == 0) *out = tile[kStaticFloats - 1] + extra[kSharedThreads - 1];
}

__global__ void __launch_bounds__(kBoundedThreads) bounded_kernel(float* __restrict__ out) {  // [threads]
  out[threadIdx.x] = 1.0f;
}

cudaLaunchConfig_t config_of(int threads, std::size_t shared_bytes, cudaStream_t stream) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1);
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  return config;
}

}  // namespace

cudaError_t launch_static_and_dynamic_shared(float* out, std::size_t dynamic_bytes, cudaStream_t stream) {
  return cuda::detail::launch_with<static_and_dynamic_shared_kernel>(
      config_of(kSharedThreads, dynamic_bytes, stream), out);
}

cudaError_t static_and_dynamic_shared_attributes(cudaFuncAttributes* attributes) {
  return cudaFuncGetAttributes(attributes, static_and_dynamic_shared_kernel);
}

cudaError_t raise_dynamic_shared_limit(int bytes) {
  return cudaFuncSetAttribute(static_and_dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              bytes);
}

cudaError_t launch_bounded(float* out, int threads, cudaStream_t stream) {
  return cuda::detail::launch_with<bounded_kernel>(config_of(threads, 0, stream), out);
}

cudaError_t bounded_attributes(cudaFuncAttributes* attributes) {
  return cudaFuncGetAttributes(attributes, bounded_kernel);
}

cudaError_t bounded_occupancy(int* blocks, int threads) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, bounded_kernel, threads, 0);
}

}  // namespace mnistdp::emu_test
