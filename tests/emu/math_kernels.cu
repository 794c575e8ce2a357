// The kernel of math_kernels.hpp.
#include <cmath>

#include "kernels/cuda/runtime/launch.cuh"
#include "tests/emu/math_kernels.hpp"

namespace mnistdp::emu_test {
namespace {

__global__ void exp_and_log_kernel(const float* __restrict__ x,  // [n]
                                   float* __restrict__ exps,     // [n]
                                   float* __restrict__ logs,     // [n]
                                   int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) {
    exps[i] = expf(x[i]);
    logs[i] = logf(x[i]);
  }
}

__global__ void erf_kernel(const float* __restrict__ x,  // [n]
                           float* __restrict__ erfs,     // [n]
                           int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) erfs[i] = erff(x[i]);
}

}  // namespace

void exp_and_log(const float* x, float* exps, float* logs, int n, cudaStream_t stream) {
  constexpr int kThreads = 128;
  cuda::detail::launch<exp_and_log_kernel>(static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0,
                                           stream, x, exps, logs, n);
}

void erf_of(const float* x, float* erfs, int n, cudaStream_t stream) {
  constexpr int kThreads = 128;
  cuda::detail::launch<erf_kernel>(static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream,
                                   x, erfs, n);
}

}  // namespace mnistdp::emu_test
