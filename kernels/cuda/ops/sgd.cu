// The fused SGD step: each element of the parameter buffer is read, updated and written once, in one launch.
// The element's arithmetic is sgd_update.cuh's, which rounds exactly as the plain C++ reference does.
#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "kernels/cuda/ops/loss_watch.cuh"
#include "kernels/cuda/ops/sgd.hpp"
#include "kernels/cuda/ops/sgd_update.cuh"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/launch.cuh"

namespace mnistdp::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;  // grid-stride beyond this; 203,530 parameters need 199 blocks of quads

// kVec4: params, grads and momentum 16-byte aligned, so that each thread moves four elements with 128-bit
// loads and stores (a quarter of the threads and memory instructions); the n % 4 elements past the last
// quad go one by one. Each element's arithmetic is sgd_element's either way, so the bits are the same.
template <bool kVec4>
__global__ void __launch_bounds__(kThreads) sgd_kernel(float* __restrict__ params,       // [n]
                                                       const float* __restrict__ grads,  // [n]
                                                       float* __restrict__ momentum,     // [n] or nullptr
                                                       std::size_t n, SgdConfig cfg, bool first_step,
                                                       const float* __restrict__ loss_sum,  // [1] or nullptr
                                                       LossWatch* __restrict__ watch) {     // [1] or nullptr
  // The step's last kernel: the loss, read here, is final (the all-reduce came before) and nothing writes it.
  if (watch && blockIdx.x == 0 && threadIdx.x == 0) detail::watch_loss(watch, *loss_sum);
  const std::size_t first = blockIdx.x * static_cast<std::size_t>(kThreads) + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kThreads;
  std::size_t scalar_from = 0;
  if constexpr (kVec4) {
    const std::size_t quads = n / 4;
    auto* params4 = reinterpret_cast<float4*>(params);
    const auto* grads4 = reinterpret_cast<const float4*>(grads);
    auto* momentum4 = reinterpret_cast<float4*>(momentum);
    // The momentum is read only where sgd_element would read it (not on the first step), written where it
    // would write it.
    const bool with_momentum = momentum && cfg.momentum != 0.0f;
    for (std::size_t q = first; q < quads; q += stride) {
      float4 p = params4[q];
      const float4 g = grads4[q];
      float4 m{};
      if (with_momentum && !first_step) m = momentum4[q];
      p.x = detail::sgd_element(p.x, g.x, &m.x, cfg, first_step);
      p.y = detail::sgd_element(p.y, g.y, &m.y, cfg, first_step);
      p.z = detail::sgd_element(p.z, g.z, &m.z, cfg, first_step);
      p.w = detail::sgd_element(p.w, g.w, &m.w, cfg, first_step);
      params4[q] = p;
      if (with_momentum) momentum4[q] = m;
    }
    scalar_from = quads * 4;
  }
  for (std::size_t i = scalar_from + first; i < n; i += stride)
    params[i] = detail::sgd_element(params[i], grads[i], momentum ? momentum + i : nullptr, cfg, first_step);
}

bool aligned16(const float* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

}  // namespace

void sgd_step(float* params, const float* grads, float* momentum, std::size_t n, const SgdConfig& cfg,
              bool first_step, cudaStream_t stream, const float* loss_sum, LossWatch* watch) {
  if (cfg.momentum != 0.0f && !momentum)
    throw std::invalid_argument("sgd_step: momentum != 0 needs a buffer");
  if (watch && !loss_sum) throw std::invalid_argument("sgd_step: a loss record needs the loss sum");
  if (n == 0 && !watch) return;
  const bool vec4 = aligned16(params) && aligned16(grads) && (!momentum || aligned16(momentum));
  // Vectorised, one thread a quad, and at least one thread for each element of the tail (at most three).
  const std::size_t threads = vec4 ? std::max<std::size_t>(n / 4, n % 4) : n;
  const auto blocks =
      static_cast<unsigned>(std::clamp<std::size_t>((threads + kThreads - 1) / kThreads, 1, kMaxBlocks));
  if (vec4) {
    detail::launch<sgd_kernel<true>>(blocks, kThreads, 0, stream, params, grads, momentum, n, cfg, first_step,
                                     loss_sum, watch);
  } else {
    detail::launch<sgd_kernel<false>>(blocks, kThreads, 0, stream, params, grads, momentum, n, cfg,
                                      first_step, loss_sum, watch);
  }
}

}  // namespace mnistdp::cuda
