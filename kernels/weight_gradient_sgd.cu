// A layer's weight gradient and the SGD step of every parameter, in one launch (contract:
// weight_gradient_sgd_cuda.hpp). One thread per parameter: for the layer's weights it first sums the
// gradient, dw[o, j] = sum over rows of dy[r, o] x[r, j], rows ascending with fused multiply-adds from 0, as
// every hand-written GEMM sums an element; the others read theirs from the gradient buffer. Then the update
// is sgd_update.cuh's, as in the SGD kernel. A warp's threads hold consecutive j of one o: the loads of x
// coalesce and the load of dy is one broadcast.
#include <algorithm>
#include <limits>
#include <stdexcept>

#include "kernels/cuda_check.hpp"
#include "kernels/programmatic_launch.cuh"
#include "kernels/sgd_update.cuh"
#include "kernels/weight_gradient_sgd_cuda.hpp"

namespace mnistdp::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::size_t kMaxBlocks = 4096;  // grid-stride beyond this; SimpleNet's 203,530 need 796 blocks

__global__ void __launch_bounds__(kThreads) weight_gradient_sgd_kernel(WeightGradientSgdArgs a) {
  const float* __restrict__ dy = a.dy;  // [batch, out]
  const float* __restrict__ x = a.x;    // [batch, in]
  // 32-bit indices (the launcher checks that they suffice): a 64-bit division is a long routine on the GPU.
  const int n = static_cast<int>(a.n);
  const int weights = a.out * a.in;
  detail::wait_for_previous_kernel();  // dy, the gradients and the offset come from the kernels before
  for (int i = static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x); i < n;
       i += static_cast<int>(gridDim.x) * kThreads) {
    float g;
    if (i < weights) {
      const int o = i / a.in;
      const int j = i % a.in;
      float acc = 0.0f;
      for (int r = 0; r < a.batch; ++r)
        acc = fmaf(dy[static_cast<long>(r) * a.out + o], x[static_cast<long>(r) * a.in + j], acc);
      a.grads[i] = acc;
      g = acc;
    } else {
      g = a.grads[i];
    }
    a.params[i] =
        detail::sgd_element(a.params[i], g, a.momentum ? a.momentum + i : nullptr, a.sgd, a.first_step);
  }
  // Every block of the step's earlier kernels has read the offset: this kernel's wait above returned once
  // they had finished (or, launched the serial way, it began after them).
  if (a.cursor && blockIdx.x == 0 && threadIdx.x == 0) *a.cursor += a.cursor_delta;
}

}  // namespace

void weight_gradient_sgd(const WeightGradientSgdArgs& a, cudaStream_t stream, LaunchOrder order) {
  if (a.batch < 0 || a.in < 0 || a.out < 0) throw std::invalid_argument("weight_gradient_sgd: negative size");
  const std::size_t weights = static_cast<std::size_t>(a.out) * static_cast<std::size_t>(a.in);
  if (a.n < weights)
    throw std::invalid_argument("weight_gradient_sgd: the buffers are shorter than the weights");
  if (a.n > static_cast<std::size_t>(std::numeric_limits<int>::max()) - kMaxBlocks * kThreads)
    throw std::invalid_argument(
        "weight_gradient_sgd: more parameters than the kernel's 32-bit indices reach");
  if (!a.params || !a.grads || (a.batch > 0 && weights > 0 && (!a.dy || !a.x)))
    throw std::invalid_argument("weight_gradient_sgd: null pointer");
  if (a.sgd.momentum != 0.0f && !a.momentum)
    throw std::invalid_argument("weight_gradient_sgd: momentum != 0 needs a buffer");
  if (a.n == 0 && !a.cursor) return;
  const std::size_t blocks = std::clamp<std::size_t>((a.n + kThreads - 1) / kThreads, 1, kMaxBlocks);
  detail::launch<weight_gradient_sgd_kernel>(dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream,
                                             order, a);
}

}  // namespace mnistdp::cuda
