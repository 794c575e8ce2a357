#pragma once
// Small kernels with the bugs the emulated build must catch, and their correct twins (broken_kernels.cu).
// Each launcher enqueues on `stream` and returns at once; the caller synchronises.
#include <cuda_runtime_api.h>

namespace mnistdp::emu_test {

// out[0] = the sum of in[0 .. threads), added by thread 0 from shared memory that every thread filled: with
// `barrier`, after a __syncthreads(); without, thread 0 may read slots not yet written.
void block_sum(const float* in, float* out, int threads, bool barrier, cudaStream_t stream);

// out[b] = the sum of in[b * 128 .. (b + 1) * 128) for each of `blocks` blocks of 128 threads, from a static
// shared array with no barrier before thread 0 reads it.
void static_block_sum_without_barrier(const float* in, float* out, int blocks, cudaStream_t stream);

// p[0 .. n) = value.
void fill(float* p, int n, float value, cudaStream_t stream);

// dst[0 .. n) = src[0 .. n).
void copy(const float* src, float* dst, int n, cudaStream_t stream);

// One warp whose lane 31 returns before the others' __shfl_xor_sync over the full mask.
void shuffle_with_a_lane_missing(float* out, cudaStream_t stream);

// One warp: out[lane] = what lane + 1 (mod 32) wrote to shared memory, read after __syncwarp() or without it.
void warp_neighbour(float* out, bool sync_warp, cudaStream_t stream);

// One warp whose lane 31 returns before the others' __syncwarp() over the full mask.
void syncwarp_with_a_lane_missing(float* out, cudaStream_t stream);

// Writes p[n], one past the end of an allocation of n floats.
void store_past_the_end(float* p, int n, cudaStream_t stream);
// in: [4 * threads + 4], out: [threads]. Thread t loads the float4 at in + 4 t + offset: misaligned unless
// offset is a multiple of 4.
void load_float4_at(const float* in, int offset, float* out, int threads, cudaStream_t stream);

// Half the block returns while the other half waits at __syncthreads().
void barrier_with_threads_gone(float* out, cudaStream_t stream);

// grid.sync() in a kernel launched the ordinary way.
void grid_sync_without_cooperative_launch(cudaStream_t stream);

// p[0 .. n) = value, written after the kernel allows the next one to start
// (cudaTriggerProgrammaticLaunchCompletion): the primary of a programmatic launch.
void fill_after_trigger(float* p, int n, float value, cudaStream_t stream);

// p[0 .. n) = value, written after a barrier that follows thread 0's
// cudaTriggerProgrammaticLaunchCompletion() (the block's only call): the primary of a programmatic launch
// whose blocks trigger before any write.
void fill_after_one_threads_trigger(float* p, int n, float value, cudaStream_t stream);

// dst[0 .. n) = src[0 .. n), launched programmatically after the kernel before on `stream`. With
// `read_first`, each thread reads src before cudaGridDependencySynchronize(), which only the wait makes safe
// when src is the kernel before's output.
void copy_programmatically(const float* src, float* dst, int n, bool read_first, cudaStream_t stream);

}  // namespace mnistdp::emu_test
