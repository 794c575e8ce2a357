// The fused SGD step: each element of the parameter buffer is read, updated and written once, in one launch.
// The element's arithmetic is sgd_update.cuh's, which rounds exactly as the plain C++ reference does.
#include <algorithm>
#include <stdexcept>

#include "kernels/cuda_check.hpp"
#include "kernels/kernel_launch.cuh"
#include "kernels/loss_watch.cuh"
#include "kernels/sgd_cuda.hpp"
#include "kernels/sgd_update.cuh"

namespace mnistdp::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;  // grid-stride beyond this; 203,530 parameters need 796 blocks

__global__ void __launch_bounds__(kThreads) sgd_kernel(float* __restrict__ params,       // [n]
                                                       const float* __restrict__ grads,  // [n]
                                                       float* __restrict__ momentum,     // [n] or nullptr
                                                       std::size_t n, SgdConfig cfg, bool first_step,
                                                       const float* __restrict__ loss_sum,  // [1] or nullptr
                                                       LossWatch* __restrict__ watch) {     // [1] or nullptr
  // The step's last kernel: the loss, read here, is final (the all-reduce came before) and nothing writes it.
  if (watch && blockIdx.x == 0 && threadIdx.x == 0) detail::watch_loss(watch, *loss_sum);
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * kThreads)
    params[i] = detail::sgd_element(params[i], grads[i], momentum ? momentum + i : nullptr, cfg, first_step);
}

}  // namespace

void sgd_step(float* params, const float* grads, float* momentum, std::size_t n, const SgdConfig& cfg,
              bool first_step, cudaStream_t stream, const float* loss_sum, LossWatch* watch) {
  if (cfg.momentum != 0.0f && !momentum)
    throw std::invalid_argument("sgd_step: momentum != 0 needs a buffer");
  if (watch && !loss_sum) throw std::invalid_argument("sgd_step: a loss record needs the loss sum");
  if (n == 0 && !watch) return;
  const std::size_t blocks = std::clamp<std::size_t>((n + kThreads - 1) / kThreads, 1, kMaxBlocks);
  detail::launch<sgd_kernel>(static_cast<unsigned>(blocks), kThreads, 0, stream, params, grads, momentum, n,
                             cfg, first_step, loss_sum, watch);
}

}  // namespace mnistdp::cuda
