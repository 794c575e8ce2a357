// Softmax cross-entropy, forward and backward fused: one warp per row (the rows are short: 10 classes), one
// block for the batch. The loss sum needs no float atomics: each warp sums its rows in order and the block
// sums the warps in order, so the result is the same on every run. The row's work is in softmax_xent_row.cuh,
// shared with the fused classifier head (classifier_head.cu).
#include <stdexcept>

#include "kernels/cuda/ops/softmax_xent.hpp"
#include "kernels/cuda/ops/softmax_xent_row.cuh"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/launch.cuh"
#include "kernels/cuda/runtime/portable_dialect.cuh"

namespace mnistdp::cuda {
namespace {

using detail::kLossWarps;
using detail::kWarpSize;
constexpr int kThreads = kLossWarps * kWarpSize;

__global__ void __launch_bounds__(kThreads)
    softmax_xent_kernel(const float* __restrict__ logits,         // [batch, classes]
                        const std::uint8_t* __restrict__ labels,  // [batch]
                        float* __restrict__ dlogits,              // [batch, classes] or nullptr
                        float* __restrict__ loss_sum,             // [1]
                        int batch, int classes, float grad_scale) {
  using WarpLosses = float[kLossWarps];
  MNISTDP_SHARED(WarpLosses, warp_losses);
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;

  float loss = 0.0f;  // this warp's rows, identical in every lane
  for (int row = warp; row < batch; row += kLossWarps) {
    loss += detail::softmax_xent_row(logits + static_cast<long>(row) * classes, labels[row],
                                     dlogits ? dlogits + static_cast<long>(row) * classes : nullptr, classes,
                                     grad_scale, lane);
  }
  if (lane == 0) warp_losses[warp] = loss;
  __syncthreads();
  if (threadIdx.x == 0) *loss_sum = detail::sum_warp_losses(warp_losses);
}

}  // namespace

void softmax_xent(const float* logits, const std::uint8_t* labels, float* dlogits, float* loss_sum, int batch,
                  int classes, float grad_scale, cudaStream_t stream) {
  if (batch < 0 || classes < 1) throw std::invalid_argument("softmax_xent: bad shape");
  // Launched even for batch 0: the loss sum must still be written (as 0).
  detail::launch<softmax_xent_kernel>(1, kThreads, 0, stream, logits, labels, dlogits, loss_sum, batch,
                                      classes, grad_scale);
}

}  // namespace mnistdp::cuda
