#pragma once
// torch.optim.SGD on the device: one launch over the whole flat parameter buffer (contract:
// kernels/ref/sgd.hpp).
#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cuda/ops/loss_watch.hpp"
#include "kernels/ref/sgd.hpp"

namespace mnistdp::cuda {

// params, grads, momentum: [n] device memory. momentum may be nullptr when cfg.momentum == 0. first_step: the
// momentum buffer is initialised with the gradient rather than updated, as torch.optim.SGD does.
// loss_sum: [1] device memory, the step's loss sum; watch: [1] device memory, the step's record
// (loss_watch.hpp), which the kernel moves on by this step. Both nullptr, or both given.
void sgd_step(float* params, const float* grads, float* momentum, std::size_t n, const SgdConfig& cfg,
              bool first_step, cudaStream_t stream, const float* loss_sum = nullptr,
              LossWatch* watch = nullptr);

}  // namespace mnistdp::cuda
