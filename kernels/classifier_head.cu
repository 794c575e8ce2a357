// The fused classifier head (contract: classifier_head_cuda.hpp). One launch, three phases per block:
//
//   1. every block computes all the logits into shared memory (640 dot products of 256 at batch 64), each
//      thread running up to kLogitsPerPass of them side by side, so that their chains of dependent
//      multiply-adds overlap;
//   2. every block computes their softmax cross-entropy gradient into shared memory, as softmax_xent does;
//   3. each thread of the grid takes one task: a column of dh (with its sum, fc1's bias gradient), an
//      element of dw, or an element of db (classifier_head_split.hpp shares them out).
//
// Phases 1 and 2 are repeated in every block rather than done once: the alternative, a grid-wide barrier or
// a second launch, costs more than the 0.3 MFLOP they take at batch 64. Block 0 alone writes the logits,
// their gradient and the loss sum to global memory. The summation orders, which make every output equal to
// the plain path's to the bit, are given in the header.
#include <stdexcept>
#include <string>

#include "kernels/classifier_head_cuda.hpp"
#include "kernels/classifier_head_split.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/gemm_common.cuh"
#include "kernels/programmatic_launch.cuh"
#include "kernels/softmax_xent_row.cuh"

namespace mnistdp::cuda {
namespace {

using detail::kLossWarps;
using detail::kWarpSize;
// Every warp of a block takes softmax rows, split as softmax_xent splits them.
constexpr int kThreads = kLossWarps * kWarpSize;
static_assert(kThreads == head_split::kThreads && kWarpSize == head_split::kWarpSize);
// 640 logits at batch 64 over 256 threads: 3 passes' worth in one.
constexpr int kLogitsPerPass = 3;
// A block gets 48 KiB without opting in to more; the static warp_losses take a few bytes of it.
constexpr long kMaxSharedBytes = 47 * 1024;

long shared_bytes(int batch, int classes) {
  return 2L * batch * classes * static_cast<long>(sizeof(float));
}

__global__ void __launch_bounds__(kThreads) classifier_head_kernel(ClassifierHeadArgs a) {
  extern __shared__ float shared[];
  const int n_logits = a.batch * a.classes;
  float* z = shared;              // [batch, classes]: the logits
  float* dz = shared + n_logits;  // [batch, classes]: their gradient
  __shared__ float warp_losses[kLossWarps];
  const bool writer = blockIdx.x == 0;
  // Read-only for the whole kernel (the outputs are other buffers): the compiler may load them through the
  // read-only cache and schedule the loads ahead of the stores to dh and dw.
  const float* __restrict__ h = a.h;                   // [batch, hidden]
  const float* __restrict__ w = a.w;                   // [classes, hidden]
  const float* __restrict__ b = a.b;                   // [classes]
  const std::uint8_t* __restrict__ labels = a.labels;  // [batch]
  detail::wait_for_previous_kernel();  // h (and in the fused step y) come from the kernel before
  detail::allow_next_kernel();

  // 1. z = h w^T + b: each logit by one thread, k ascending, as the GEMMs sum (then the bias, their
  // epilogue). A thread's logits i, i + kThreads, ... advance together; one past the end computes row 0's
  // first logit again and keeps nothing.
  for (int base = threadIdx.x; base < n_logits; base += kThreads * kLogitsPerPass) {
    const float* __restrict__ h_rows[kLogitsPerPass];
    const float* __restrict__ w_rows[kLogitsPerPass];
    float acc[kLogitsPerPass];
#pragma unroll
    for (int j = 0; j < kLogitsPerPass; ++j) {
      const int i = base + j * kThreads;
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
      const int i = base + j * kThreads;
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
    loss += detail::softmax_xent_row(z + at, labels[r], dz + at, a.classes, a.grad_scale, lane);
  }
  if (lane == 0) warp_losses[warp] = loss;
  __syncthreads();
  if (writer) {
    if (threadIdx.x == 0) *a.loss_sum = detail::sum_warp_losses(warp_losses);
    for (int i = threadIdx.x; i < n_logits; i += kThreads)
      a.dlogits[i] = dz[i];
  }

  // 3. The backward products, one task per thread (classifier_head_split.hpp); each sum in the order the
  // plain path's kernels use.
  const int dw_count = a.classes * a.hidden;
  const int block = static_cast<int>(blockIdx.x);
  if (block < head_split::column_warps(a.hidden) && warp == 0) {
    // dh[:, k] = dz w[:, k] masked by the ReLU (the fc2 input-gradient GEMM and its epilogue), and its sum
    // over the rows in row order (column_sums).
    const int k = block * kWarpSize + lane;
    if (k >= a.hidden) return;
    float sum = 0.0f;
    for (int r = 0; r < a.batch; ++r) {
      const float* dz_row = dz + static_cast<long>(r) * a.classes;
      float acc = 0.0f;
      for (int c = 0; c < a.classes; ++c)
        acc = fmaf(dz_row[c], w[static_cast<long>(c) * a.hidden + k], acc);
      const long at = static_cast<long>(r) * a.hidden + k;
      const float g = h[at] <= 0.0f ? 0.0f : acc;  // written as the epilogue writes it: a NaN keeps acc
      a.dh[at] = g;
      sum += g;
    }
    a.dh_sums[k] = sum;
    return;
  }
  const int task = head_split::other_task(block, static_cast<int>(threadIdx.x), a.hidden);
  if (task < dw_count) {
    // dw[c, k] = sum over rows of dz[r, c] h[r, k] (the fc2 weight-gradient GEMM, k being its rows).
    const int i = task;
    const int c = i / a.hidden;
    const int k = i % a.hidden;
    float acc = 0.0f;
    for (int r = 0; r < a.batch; ++r)
      acc = fmaf(dz[static_cast<long>(r) * a.classes + c], h[static_cast<long>(r) * a.hidden + k], acc);
    a.dw[i] = acc;
  } else if (task < dw_count + a.classes) {
    // db[c]: column_sums of dz.
    const int c = task - dw_count;
    float acc = 0.0f;
    for (int r = 0; r < a.batch; ++r)
      acc += dz[static_cast<long>(r) * a.classes + c];
    a.db[c] = acc;
  }
}

}  // namespace

bool classifier_head_fits(int batch, int classes) {
  return batch >= 0 && classes >= 1 && shared_bytes(batch, classes) <= kMaxSharedBytes;
}

void classifier_head(const ClassifierHeadArgs& a, cudaStream_t stream, LaunchOrder order) {
  if (a.batch < 0 || a.hidden < 1 || a.classes < 1) throw std::invalid_argument("classifier_head: bad shape");
  if (!classifier_head_fits(a.batch, a.classes)) {
    throw std::invalid_argument("classifier_head: " + std::to_string(a.batch) + " rows of " +
                                std::to_string(a.classes) +
                                " classes do not fit in one block's shared memory");
  }
  // The per-row buffers are not touched without rows (and an empty device buffer has no address).
  const bool rows_given = a.batch == 0 || (a.h && a.labels && a.logits && a.dlogits && a.dh);
  if (!rows_given || !a.w || !a.b || !a.loss_sum || !a.dw || !a.db || !a.dh_sums)
    throw std::invalid_argument("classifier_head: null pointer");
  const auto shared = static_cast<std::size_t>(shared_bytes(a.batch, a.classes));
  detail::launch<classifier_head_kernel>(
      dim3(static_cast<unsigned>(head_split::grid_blocks(a.hidden, a.classes))), dim3(kThreads), shared,
      stream, order, a);
}

}  // namespace mnistdp::cuda
