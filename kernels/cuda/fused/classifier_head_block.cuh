#pragma once
// One block of the fused classifier head (contract: kernels/cuda/fused/classifier_head.hpp), shared by its
// own launch (classifier_head.cu) and the persistent step (persistent_step.cu), which must give the same
// bits. CUDA-only (included by .cu files alone). Three phases:
//
//   1. the block computes all the logits into shared memory (640 dot products of 256 at batch 64), each
//      thread running up to kLogitsPerPass of them side by side, so that their chains of dependent
//      multiply-adds overlap;
//   2. the block computes their softmax cross-entropy gradient into shared memory, as softmax_xent does;
//   3. each thread takes one task of the block's: a column of dh (with its sum, fc1's bias gradient), an
//      element of dw, or an element of db (classifier_head_split.hpp shares them out).
//
// Phases 1 and 2 are repeated in every block rather than done once: the alternative, a grid-wide barrier or
// a second launch, costs more than the 0.3 MFLOP they take at batch 64. Block 0 alone writes the logits,
// their gradient and the loss sum to global memory. The summation orders, which make every output equal to
// the plain path's to the bit, are given in kernels/cuda/fused/classifier_head.hpp.
#include "kernels/cuda/fused/classifier_head.hpp"
#include "kernels/cuda/fused/classifier_head_split.hpp"
#include "kernels/cuda/ops/softmax_xent_row.cuh"
#include "kernels/cuda/runtime/portable_dialect.cuh"
#include "kernels/ref/activation.hpp"

namespace mnistdp::cuda::detail {

// Every warp of a block takes softmax rows, split as softmax_xent splits them.
inline constexpr int kHeadThreads = kLossWarps * kWarpSize;
static_assert(kHeadThreads == head_split::kThreads && kWarpSize == head_split::kWarpSize);

// The shared memory a block's phases 1 and 2 keep: the logits and their gradient.
__host__ __device__ constexpr long classifier_head_shared_bytes(int batch, int classes) {
  return 2L * batch * classes * static_cast<long>(sizeof(float));
}

// Block `block` of the head's grid (head_split::grid_blocks blocks), by the kHeadThreads threads of the
// calling block, all of them. shared: classifier_head_shared_bytes. A caller that runs it again on the same
// shared memory puts a __syncthreads() between the two. kAct: a.activation, chosen by the launch.
template <Activation kAct>
__device__ __forceinline__ void classifier_head_block(const ClassifierHeadArgs& a, int block, float* shared) {
  using Act = ActivationFn<kAct>;
  // 640 logits at batch 64 over 256 threads: 3 passes' worth in one.
  constexpr int kLogitsPerPass = 3;
  const int n_logits = a.batch * a.classes;
  float* z = shared;              // [batch, classes]: the logits
  float* dz = shared + n_logits;  // [batch, classes]: their gradient
  using WarpLosses = float[kLossWarps];
  MNISTDP_SHARED(WarpLosses, warp_losses);
  const bool writer = block == 0;
  // Not written by this block's phases (the outputs are other buffers): the compiler may schedule the loads
  // ahead of the stores to dh and dw. (They do change between the persistent step's phases, so the
  // read-only cache, which is not kept coherent within a launch, must not serve them: tests/ptx checks that
  // the compiled code never asks it to.)
  const float* __restrict__ h = a.h;  // [batch, hidden]
  // What the activation's derivative reads: z where it reads its input, else h.
  const float* __restrict__ saved = Act::kReadsInput ? a.z : a.h;  // [batch, hidden]
  const float* __restrict__ w = a.w;                               // [classes, hidden]
  const float* __restrict__ b = a.b;                               // [classes]
  const std::uint8_t* __restrict__ labels = a.labels;              // [batch]

  // 1. z = h w^T + b: each logit by one thread, k ascending, as the GEMMs sum (then the bias, their
  // epilogue). A thread's logits i, i + kHeadThreads, ... advance together; one past the end computes row 0's
  // first logit again and keeps nothing.
  for (int base = threadIdx.x; base < n_logits; base += kHeadThreads * kLogitsPerPass) {
    const float* __restrict__ h_rows[kLogitsPerPass];
    const float* __restrict__ w_rows[kLogitsPerPass];
    float acc[kLogitsPerPass];
#pragma unroll
    for (int j = 0; j < kLogitsPerPass; ++j) {
      const int i = base + j * kHeadThreads;
      const int r = i < n_logits ? i / a.classes : 0;
      const int c = i < n_logits ? i % a.classes : 0;
      h_rows[j] = h + static_cast<long>(r) * a.hidden;
      w_rows[j] = w + static_cast<long>(c) * a.hidden;
      acc[j] = 0.0f;
    }
    for (int k = 0; k < a.hidden; ++k) {
#pragma unroll
      for (int j = 0; j < kLogitsPerPass; ++j)
        acc[j] = fmaf(h_rows[j][k], w_rows[j][k], acc[j]);
    }
#pragma unroll
    for (int j = 0; j < kLogitsPerPass; ++j) {
      const int i = base + j * kHeadThreads;
      if (i >= n_logits) continue;
      z[i] = acc[j] + b[i % a.classes];
      if (writer) a.logits[i] = z[i];
    }
  }
  __syncthreads();

  // 2. dz and the loss, row r by warp r % kLossWarps.
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  float loss = 0.0f;
  for (int r = warp; r < a.batch; r += kLossWarps) {
    const long at = static_cast<long>(r) * a.classes;
    loss += softmax_xent_row(z + at, labels[r], dz + at, a.classes, a.grad_scale, lane);
  }
  if (lane == 0) warp_losses[warp] = loss;
  __syncthreads();
  if (writer) {
    if (threadIdx.x == 0) *a.loss_sum = sum_warp_losses(warp_losses);
    for (int i = threadIdx.x; i < n_logits; i += kHeadThreads)
      a.dlogits[i] = dz[i];
  }

  // 3. The backward products, one task per thread (classifier_head_split.hpp); each sum in the order the
  // plain path's kernels use.
  const int dw_count = a.classes * a.hidden;
  const int task = head_split::other_task(block, static_cast<int>(threadIdx.x), a.hidden);
  if (block < head_split::column_warps(a.hidden) && warp == 0) {
    // dh[:, k] = dz w[:, k] times the activation's derivative, read from h or z (the fc2 input-gradient
    // GEMM and its epilogue, the same function), and its sum over the rows in row order (column_sums).
    const int k = block * kWarpSize + lane;
    if (k < a.hidden) {
      float sum = 0.0f;
      for (int r = 0; r < a.batch; ++r) {
        const float* dz_row = dz + static_cast<long>(r) * a.classes;
        float acc = 0.0f;
        for (int c = 0; c < a.classes; ++c)
          acc = fmaf(dz_row[c], w[static_cast<long>(c) * a.hidden + k], acc);
        const long at = static_cast<long>(r) * a.hidden + k;
        const float g = Act::backward(acc, saved[at]);  // ReLU's: a NaN in h keeps acc
        a.dh[at] = g;
        sum += g;
      }
      a.dh_sums[k] = sum;
    }
  } else if (task < dw_count) {
    // dw[c, k] = sum over rows of dz[r, c] h[r, k] (the fc2 weight-gradient GEMM, k being its rows).
    const int c = task / a.hidden;
    const int k = task % a.hidden;
    float acc = 0.0f;
    for (int r = 0; r < a.batch; ++r)
      acc = fmaf(dz[static_cast<long>(r) * a.classes + c], h[static_cast<long>(r) * a.hidden + k], acc);
    a.dw[task] = acc;
  } else if (task < dw_count + a.classes) {
    // db[c]: column_sums of dz.
    const int c = task - dw_count;
    float acc = 0.0f;
    for (int r = 0; r < a.batch; ++r)
      acc += dz[static_cast<long>(r) * a.classes + c];
    a.db[c] = acc;
  }
}

}  // namespace mnistdp::cuda::detail
