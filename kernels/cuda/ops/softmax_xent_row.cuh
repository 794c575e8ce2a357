#pragma once
// One row of softmax cross-entropy, done by one warp: the code that softmax_xent_kernel and the fused
// classifier head share, so that both produce the same bits. CUDA-only (included by .cu files alone).
//
// Rows are split over kLossWarps warps (row r to warp r % kLossWarps); each warp adds its rows' losses in
// row order, and one thread adds the warps' sums in warp order. A kernel that follows this split gets the
// loss sum of softmax_xent to the bit.
#include <cmath>
#include <cstdint>

namespace mnistdp::cuda::detail {

constexpr int kWarpSize = 32;
constexpr int kLossWarps = 8;
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

// Called by all 32 lanes of a warp. z: [classes] the row's logits. Writes d: [classes] = (softmax(z) -
// onehot(label)) * grad_scale unless d is nullptr. Returns -log softmax(z)[label] in every lane.
__device__ __forceinline__ float softmax_xent_row(const float* z, int label, float* d, int classes,
                                                  float grad_scale, int lane) {
  // The log-sum-exp shift: exp never overflows and the largest term is exactly 1.
  float zmax = -INFINITY;
  for (int c = lane; c < classes; c += kWarpSize)
    zmax = fmaxf(zmax, z[c]);
  zmax = warp_max(zmax);
  float sum = 0.0f;
  for (int c = lane; c < classes; c += kWarpSize)
    sum += expf(z[c] - zmax);
  sum = warp_sum(sum);
  if (d) {
    for (int c = lane; c < classes; c += kWarpSize) {
      const float p = expf(z[c] - zmax) / sum;
      d[c] = (p - (c == label ? 1.0f : 0.0f)) * grad_scale;
    }
  }
  // -log softmax[label] = log(sum exp(z - zmax)) - (z[label] - zmax)
  return logf(sum) - (z[label] - zmax);
}

// Adds the kLossWarps warps' sums in warp order; one thread's work. warp_losses: [kLossWarps]
__device__ __forceinline__ float sum_warp_losses(const float* warp_losses) {
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kLossWarps; ++w)
    total += warp_losses[w];
  return total;
}

}  // namespace mnistdp::cuda::detail
