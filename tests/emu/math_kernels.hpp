#pragma once
// Kernels that call the device's expf, logf and erff, for the test of their latitude (math_kernels.cu).
// Enqueues on `stream` and returns at once; the caller synchronises.
#include <cuda_runtime_api.h>

namespace mnistdp::emu_test {

// exps[i] = expf(x[i]) and logs[i] = logf(x[i]) for i in [0, n).
void exp_and_log(const float* x, float* exps, float* logs, int n, cudaStream_t stream);
// erfs[i] = erff(x[i]) for i in [0, n).
void erf_of(const float* x, float* erfs, int n, cudaStream_t stream);

}  // namespace mnistdp::emu_test
