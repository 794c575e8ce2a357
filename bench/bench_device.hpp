#pragma once
// Small device helpers shared by the GPU benchmarks: an empty kernel (the launch-latency floor), buffer fills
// and an on-device equality count, so that large buffers are made and checked without a trip through the
// host. Host-includable: no CUDA syntax here. Every launcher checks its launch (CUDA_CHECK_LAUNCH).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace mnistdp::bench {

// One block of one thread that does nothing: what a launch costs when the kernel itself costs nothing.
void launch_empty(cudaStream_t stream);

// A persistent kernel's phase boundary, alone: one cooperative launch of one block of 256 threads per SM of
// the current device that crosses `barriers` grid-wide barriers (cooperative_groups::this_grid().sync())
// and does nothing else. Returns the number of blocks launched; throws CudaError where the device has no
// cooperative launch.
int launch_grid_barriers(int barriers, cudaStream_t stream);

// p: [n] <- uniform values in [lo, hi) from a counter-based hash of (seed, index): the same seed gives the
// same values on every device and run.
void fill_uniform(float* p, std::size_t n, std::uint32_t seed, float lo, float hi, cudaStream_t stream);

// p: [n] <- uniform bytes in [0, 256) (uint8 images), from the same hash.
void fill_uniform_u8(std::uint8_t* p, std::size_t n, std::uint32_t seed, cudaStream_t stream);

// p: [n] <- value.
void fill_value(float* p, std::size_t n, float value, cudaStream_t stream);

// count: [1] device memory <- how many of p[0, n) differ from expect (overwritten, not accumulated into).
void count_not_equal(const float* p, std::size_t n, float expect, unsigned long long* count,
                     cudaStream_t stream);

}  // namespace mnistdp::bench
