#pragma once
// A kernel that calls the device's expf and logf, for the test of their latitude (math_kernels.cu). Enqueues
// on `stream` and returns at once; the caller synchronises.
#include <cuda_runtime_api.h>

namespace mnistdp::emu_test {

// exps[i] = expf(x[i]) and logs[i] = logf(x[i]) for i in [0, n).
void exp_and_log(const float* x, float* exps, float* logs, int n, cudaStream_t stream);

}  // namespace mnistdp::emu_test
