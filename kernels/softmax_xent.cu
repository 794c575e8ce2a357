// Softmax cross-entropy, forward and backward fused: one warp per row (the rows are short: 10 classes), one
// block for the batch. The loss sum needs no float atomics: each warp sums its rows in order and the block
// sums the warps in order, so the result is the same on every run.
#include <cmath>
#include <stdexcept>

#include "kernels/cuda_check.hpp"
#include "kernels/softmax_xent_cuda.hpp"

namespace mnistdp::cuda {
namespace {

constexpr int kWarpSize = 32;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;
constexpr unsigned kFullMask = 0xffffffffu;

// Butterfly reductions: every lane ends with the same value, combined in the same order on every run.
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__global__ void __launch_bounds__(kThreads)
    softmax_xent_kernel(const float* __restrict__ logits,         // [batch, classes]
                        const std::uint8_t* __restrict__ labels,  // [batch]
                        float* __restrict__ dlogits,              // [batch, classes] or nullptr
                        float* __restrict__ loss_sum,             // [1]
                        int batch, int classes, float grad_scale) {
  __shared__ float warp_losses[kWarps];
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;

  float loss = 0.0f;  // this warp's rows, identical in every lane
  for (int row = warp; row < batch; row += kWarps) {
    const float* __restrict__ z = logits + static_cast<long>(row) * classes;
    // The log-sum-exp shift: exp never overflows and the largest term is exactly 1.
    float zmax = -INFINITY;
    for (int c = lane; c < classes; c += kWarpSize)
      zmax = fmaxf(zmax, z[c]);
    zmax = warp_max(zmax);
    float sum = 0.0f;
    for (int c = lane; c < classes; c += kWarpSize)
      sum += expf(z[c] - zmax);
    sum = warp_sum(sum);
    const int label = labels[row];
    // -log softmax[label] = log(sum exp(z - zmax)) - (z[label] - zmax)
    loss += logf(sum) - (z[label] - zmax);
    if (dlogits) {
      float* __restrict__ d = dlogits + static_cast<long>(row) * classes;
      for (int c = lane; c < classes; c += kWarpSize) {
        const float p = expf(z[c] - zmax) / sum;
        d[c] = (p - (c == label ? 1.0f : 0.0f)) * grad_scale;
      }
    }
  }
  if (lane == 0) warp_losses[warp] = loss;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      total += warp_losses[w];
    *loss_sum = total;
  }
}

}  // namespace

void softmax_xent(const float* logits, const std::uint8_t* labels, float* dlogits, float* loss_sum, int batch,
                  int classes, float grad_scale, cudaStream_t stream) {
  if (batch < 0 || classes < 1) throw std::invalid_argument("softmax_xent: bad shape");
  // Launched even for batch 0: the loss sum must still be written (as 0).
  softmax_xent_kernel<<<1, kThreads, 0, stream>>>(logits, labels, dlogits, loss_sum, batch, classes,
                                                  grad_scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace mnistdp::cuda
