// The fused SGD step: each element of the parameter buffer is read, updated and written once, in one launch.
// The arithmetic is spelled out with round-to-nearest intrinsics, in ref::sgd_step's order, so that nvcc
// cannot fuse a multiply and an add into an FMA: the GPU step then rounds exactly as the plain C++ reference
// does.
#include <algorithm>
#include <stdexcept>

#include "kernels/cuda_check.hpp"
#include "kernels/sgd_cuda.hpp"

namespace mnistdp::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;  // grid-stride beyond this; 203,530 parameters need 796 blocks

__global__ void __launch_bounds__(kThreads) sgd_kernel(float* __restrict__ params,       // [n]
                                                       const float* __restrict__ grads,  // [n]
                                                       float* __restrict__ momentum,     // [n] or nullptr
                                                       std::size_t n, SgdConfig cfg, bool first_step) {
  const bool use_momentum = cfg.momentum != 0.0f;
  const float damp = 1.0f - cfg.dampening;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * kThreads) {
    const float p = params[i];
    float g = grads[i];
    if (cfg.weight_decay != 0.0f) g = __fadd_rn(g, __fmul_rn(cfg.weight_decay, p));
    if (use_momentum) {
      const float buf = first_step ? g : __fadd_rn(__fmul_rn(cfg.momentum, momentum[i]), __fmul_rn(damp, g));
      momentum[i] = buf;
      g = cfg.nesterov ? __fadd_rn(g, __fmul_rn(cfg.momentum, buf)) : buf;
    }
    params[i] = __fsub_rn(p, __fmul_rn(cfg.lr, g));
  }
}

}  // namespace

void sgd_step(float* params, const float* grads, float* momentum, std::size_t n, const SgdConfig& cfg,
              bool first_step, cudaStream_t stream) {
  if (cfg.momentum != 0.0f && !momentum)
    throw std::invalid_argument("sgd_step: momentum != 0 needs a buffer");
  if (n == 0) return;
  const std::size_t blocks = std::min<std::size_t>((n + kThreads - 1) / kThreads, kMaxBlocks);
  sgd_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(params, grads, momentum, n, cfg,
                                                                     first_step);
  CUDA_CHECK_LAUNCH();
}

}  // namespace mnistdp::cuda
