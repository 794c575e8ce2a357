// Deliberately broken kernels for the emulated build under a sanitizer (docs/emulation.md, "The sanitizer
// builds"): `mnistdp_emu_sanitizer_probe CASE` runs one of them and exits 0. The sanitizer, not this program,
// decides the outcome: ctest passes a case only when the sanitizer's report appears and names the kernel, and
// a case that runs clean (the bug unreported) fails there.
#include <cstring>

#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/launch.cuh"
#include "kernels/cuda/runtime/memory.hpp"
#include "kernels/cuda/runtime/portable_dialect.cuh"
#include "tests/emu/probe_main.hpp"

namespace mnistdp::emu_probe {
namespace {

constexpr int kTile = 32;

// Each thread reads its right-hand neighbour's slot; the last thread reads one past the shared array.
__global__ void shared_read_past_array_kernel(const float* __restrict__ in,  // [kTile]
                                              float* __restrict__ out) {     // [kTile]
  using Tile = float[kTile];
  MNISTDP_SHARED(Tile, tile);
  tile[threadIdx.x] = in[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x + 1];
}

// A bounds check off by one: thread n reads in[n], one past an allocation of n floats.
__global__ void global_read_past_end_kernel(const float* __restrict__ in,  // [n]
                                            float* __restrict__ out,       // [n + 1]
                                            int n) {
  const int i = static_cast<int>(threadIdx.x);
  if (i <= n) out[i] = in[i];
}

// Reads an allocation that was freed before the launch.
__global__ void read_after_free_kernel(const float* __restrict__ freed,  // [1], freed
                                       float* __restrict__ out) {        // [1]
  *out = *freed;
}

void shared_read_past_array() {
  DeviceBuffer<float> in(kTile), out(kTile);
  CUDA_CHECK(cudaMemset(in.data(), 0, in.bytes()));
  cuda::detail::launch<shared_read_past_array_kernel>(1, kTile, 0, nullptr, in.data(), out.data());
  CUDA_CHECK(cudaDeviceSynchronize());
}

void global_read_past_end() {
  constexpr int kCount = 20;
  DeviceBuffer<float> in(kCount), out(kCount + 1);
  CUDA_CHECK(cudaMemset(in.data(), 0, in.bytes()));
  cuda::detail::launch<global_read_past_end_kernel>(1, kTile, 0, nullptr, in.data(), out.data(), kCount);
  CUDA_CHECK(cudaDeviceSynchronize());
}

void global_read_after_free() {
  DeviceBuffer<float> out(1);
  void* freed = nullptr;
  CUDA_CHECK(cudaMalloc(&freed, sizeof(float)));
  CUDA_CHECK(cudaFree(freed));
  cuda::detail::launch<read_after_free_kernel>(1, 1, 0, nullptr, static_cast<const float*>(freed),
                                               out.data());
  CUDA_CHECK(cudaDeviceSynchronize());
}

constexpr Case kCases[] = {
    {"shared-read-past-array", shared_read_past_array},
    {"global-read-past-end", global_read_past_end},
    {"global-read-after-free", global_read_after_free},
};

}  // namespace
}  // namespace mnistdp::emu_probe

int main(int argc, char** argv) {
  return mnistdp::emu_probe::run_case("mnistdp_emu_sanitizer_probe", mnistdp::emu_probe::kCases, argc, argv);
}
