#pragma once
// One element of torch.optim.SGD's step (contract: kernels/ref/sgd.hpp), shared by the SGD kernel and the
// fused step's last kernel so that both round alike. CUDA-only (included by .cu files alone).
//
// The arithmetic is spelled out with round-to-nearest intrinsics, in ref::sgd_step's order, so that nvcc
// cannot fuse a multiply and an add into an FMA: the GPU step then rounds exactly as the plain C++ reference
// does.
#include "kernels/ref/sgd.hpp"

namespace mnistdp::cuda::detail {

// p: the parameter, g: its gradient, momentum: its momentum slot (read and written; unused without momentum).
// Returns the updated parameter.
__device__ __forceinline__ float sgd_element(float p, float g, float* momentum, const SgdConfig& cfg,
                                             bool first_step) {
  if (cfg.weight_decay != 0.0f) g = __fadd_rn(g, __fmul_rn(cfg.weight_decay, p));
  if (cfg.momentum != 0.0f) {
    const float damp = 1.0f - cfg.dampening;
    const float buf = first_step ? g : __fadd_rn(__fmul_rn(cfg.momentum, *momentum), __fmul_rn(damp, g));
    *momentum = buf;
    g = cfg.nesterov ? __fadd_rn(g, __fmul_rn(cfg.momentum, buf)) : buf;
  }
  return __fsub_rn(p, __fmul_rn(cfg.lr, g));
}

}  // namespace mnistdp::cuda::detail
