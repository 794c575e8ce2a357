// The kernels of broken_kernels.hpp: each bug as small as it can be.
#include <cooperative_groups.h>

#include "kernels/cuda/runtime/launch.cuh"
#include "kernels/cuda/runtime/portable_dialect.cuh"
#include "kernels/cuda/runtime/programmatic_launch.cuh"
#include "tests/emu/broken_kernels.hpp"

namespace mnistdp::emu_test {
namespace {

template <bool kBarrier>
__global__ void block_sum_kernel(const float* __restrict__ in,  // [blockDim.x]
                                 float* __restrict__ out) {     // [1]
  MNISTDP_DYNAMIC_SHARED(float, partial);                       // [blockDim.x]
  partial[threadIdx.x] = in[threadIdx.x];
  if constexpr (kBarrier) __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (unsigned i = 0; i < blockDim.x; ++i)
      sum += partial[i];
    *out = sum;
  }
}

// The same with a static shared array, of a fixed 128 threads: the block after sees none of its values.
constexpr int kStaticThreads = 128;

__global__ void static_block_sum_kernel(const float* __restrict__ in,  // [gridDim.x, 128]
                                        float* __restrict__ out) {     // [gridDim.x]
  using Partial = float[kStaticThreads];
  MNISTDP_SHARED(Partial, partial);
  const float* block_in = in + blockIdx.x * kStaticThreads;
  partial[threadIdx.x] = block_in[threadIdx.x];
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int i = 0; i < kStaticThreads; ++i)
      sum += partial[i];
    out[blockIdx.x] = sum;
  }
}

__global__ void fill_kernel(float* __restrict__ p,  // [n]
                            int n, float value) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) p[i] = value;
}

__global__ void copy_kernel(const float* __restrict__ src,  // [n]
                            float* __restrict__ dst,        // [n]
                            int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) dst[i] = src[i];
}

__global__ void shuffle_with_a_lane_missing_kernel(float* __restrict__ out) {  // [32]
  if (threadIdx.x == 31) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<float>(threadIdx.x), 1);
}

// Each lane reads the slot its neighbour wrote to the warp's shared array, after __syncwarp() or without it.
template <bool kSyncWarp>
__global__ void warp_neighbour_kernel(float* __restrict__ out) {  // [32]
  using Slots = float[32];
  MNISTDP_SHARED(Slots, slots);
  slots[threadIdx.x] = static_cast<float>(threadIdx.x);
  if constexpr (kSyncWarp) __syncwarp();
  out[threadIdx.x] = slots[(threadIdx.x + 1) % 32];
}

__global__ void syncwarp_with_a_lane_missing_kernel(float* __restrict__ out) {  // [32]
  if (threadIdx.x == 31) return;
  out[threadIdx.x] = 1.0f;
  __syncwarp();
}

__global__ void store_past_the_end_kernel(float* __restrict__ p,  // [n]
                                          int n) {
  if (threadIdx.x == 0) p[n] = 1.0f;
}

// Each thread loads the float4 that starts `offset` floats into its slice of four: misaligned unless offset
// is a multiple of 4 (a float4 access needs 16-byte alignment).
__global__ void load_float4_at_kernel(const float* __restrict__ in,           // [4 * blockDim.x + 4]
                                      int offset, float* __restrict__ out) {  // [blockDim.x]
  const float4 v = *reinterpret_cast<const float4*>(in + 4 * threadIdx.x + offset);
  out[threadIdx.x] = v.x + v.y + v.z + v.w;
}

__global__ void barrier_with_threads_gone_kernel(float* __restrict__ out) {  // [blockDim.x]
  if (threadIdx.x >= blockDim.x / 2) return;
  out[threadIdx.x] = 1.0f;
  __syncthreads();
}

__global__ void grid_sync_kernel() {
  cooperative_groups::this_grid().sync();
}

__global__ void fill_after_trigger_kernel(float* __restrict__ p,  // [n]
                                          int n, float value) {
  cuda::detail::allow_next_kernel();
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) p[i] = value;
}

// Thread 0 triggers, and every thread writes only after the barrier: the block has triggered before any of
// its writes, though its other threads never call the trigger.
__global__ void fill_after_one_threads_trigger_kernel(float* __restrict__ p,  // [n]
                                                      int n, float value) {
  if (threadIdx.x == 0) cuda::detail::allow_next_kernel();
  __syncthreads();
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) p[i] = value;
}

template <bool kReadFirst>
__global__ void copy_programmatically_kernel(const float* __restrict__ src,  // [n]
                                             float* __restrict__ dst,        // [n]
                                             int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  float value = 0.0f;
  if (kReadFirst && i < n) value = src[i];
  cuda::detail::wait_for_previous_kernel();
  if (!kReadFirst && i < n) value = src[i];
  if (i < n) dst[i] = value;
}

constexpr int kThreads = 128;

unsigned blocks_for(int n) {
  return static_cast<unsigned>((n + kThreads - 1) / kThreads);
}

}  // namespace

void block_sum(const float* in, float* out, int threads, bool barrier, cudaStream_t stream) {
  const std::size_t shared = static_cast<std::size_t>(threads) * sizeof(float);
  if (barrier)
    cuda::detail::launch<block_sum_kernel<true>>(1, threads, shared, stream, in, out);
  else
    cuda::detail::launch<block_sum_kernel<false>>(1, threads, shared, stream, in, out);
}

void static_block_sum_without_barrier(const float* in, float* out, int blocks, cudaStream_t stream) {
  cuda::detail::launch<static_block_sum_kernel>(static_cast<unsigned>(blocks), kStaticThreads, 0, stream, in,
                                                out);
}

void fill(float* p, int n, float value, cudaStream_t stream) {
  cuda::detail::launch<fill_kernel>(blocks_for(n), kThreads, 0, stream, p, n, value);
}

void copy(const float* src, float* dst, int n, cudaStream_t stream) {
  cuda::detail::launch<copy_kernel>(blocks_for(n), kThreads, 0, stream, src, dst, n);
}

void shuffle_with_a_lane_missing(float* out, cudaStream_t stream) {
  cuda::detail::launch<shuffle_with_a_lane_missing_kernel>(1, 32, 0, stream, out);
}

void warp_neighbour(float* out, bool sync_warp, cudaStream_t stream) {
  if (sync_warp)
    cuda::detail::launch<warp_neighbour_kernel<true>>(1, 32, 0, stream, out);
  else
    cuda::detail::launch<warp_neighbour_kernel<false>>(1, 32, 0, stream, out);
}

void syncwarp_with_a_lane_missing(float* out, cudaStream_t stream) {
  cuda::detail::launch<syncwarp_with_a_lane_missing_kernel>(1, 32, 0, stream, out);
}

void store_past_the_end(float* p, int n, cudaStream_t stream) {
  cuda::detail::launch<store_past_the_end_kernel>(1, 32, 0, stream, p, n);
}

void load_float4_at(const float* in, int offset, float* out, int threads, cudaStream_t stream) {
  cuda::detail::launch<load_float4_at_kernel>(1, threads, 0, stream, in, offset, out);
}

void barrier_with_threads_gone(float* out, cudaStream_t stream) {
  cuda::detail::launch<barrier_with_threads_gone_kernel>(1, 64, 0, stream, out);
}

void grid_sync_without_cooperative_launch(cudaStream_t stream) {
  cuda::detail::launch<grid_sync_kernel>(2, 32, 0, stream);
}

void fill_after_trigger(float* p, int n, float value, cudaStream_t stream) {
  cuda::detail::launch<fill_after_trigger_kernel>(blocks_for(n), kThreads, 0, stream, p, n, value);
}

void fill_after_one_threads_trigger(float* p, int n, float value, cudaStream_t stream) {
  cuda::detail::launch<fill_after_one_threads_trigger_kernel>(blocks_for(n), kThreads, 0, stream, p, n,
                                                              value);
}

void copy_programmatically(const float* src, float* dst, int n, bool read_first, cudaStream_t stream) {
  const auto order = cuda::LaunchOrder::programmatic;
  if (read_first)
    cuda::detail::launch_in_order<copy_programmatically_kernel<true>>(blocks_for(n), kThreads, 0, stream,
                                                                      order, src, dst, n);
  else
    cuda::detail::launch_in_order<copy_programmatically_kernel<false>>(blocks_for(n), kThreads, 0, stream,
                                                                       order, src, dst, n);
}

}  // namespace mnistdp::emu_test
