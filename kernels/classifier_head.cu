// The fused classifier head (contract: classifier_head_cuda.hpp). One launch, three phases per block:
//
//   1. every block computes all the logits into shared memory (640 dot products of 256 at batch 64);
//   2. every block computes their softmax cross-entropy gradient into shared memory, as softmax_xent does;
//   3. each thread of the grid takes one task: a column of dh (with its sum, fc1's bias gradient), an
//      element of dw, or an element of db.
//
// Phases 1 and 2 are repeated in every block rather than done once: the alternative, a grid-wide barrier or
// a second launch, costs more than the 0.3 MFLOP they take at batch 64. Block 0 alone writes the logits,
// their gradient and the loss sum to global memory. The summation orders, which make every output equal to
// the plain path's to the bit, are given in the header.
#include <stdexcept>
#include <string>

#include "kernels/classifier_head_cuda.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/gemm_common.cuh"
#include "kernels/softmax_xent_row.cuh"

namespace mnistdp::cuda {
namespace {

using detail::kLossWarps;
using detail::kWarpSize;
// Every warp of a block takes softmax rows, split as softmax_xent splits them.
constexpr int kThreads = kLossWarps * kWarpSize;
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

  // 1. z = h w^T + b: each logit by one thread, k ascending, as the GEMMs sum (then the bias, their
  // epilogue).
  for (int i = threadIdx.x; i < n_logits; i += kThreads) {
    const int r = i / a.classes;
    const int c = i % a.classes;
    const float* __restrict__ h_row = a.h + static_cast<long>(r) * a.hidden;
    const float* __restrict__ w_row = a.w + static_cast<long>(c) * a.hidden;
    float acc = 0.0f;
    for (int k = 0; k < a.hidden; ++k)
      acc = fmaf(h_row[k], w_row[k], acc);
    z[i] = acc + a.b[c];
    if (writer) a.logits[i] = z[i];
  }
  __syncthreads();

  // 2. dz and the loss, row r by warp r % kLossWarps.
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  float loss = 0.0f;
  for (int r = warp; r < a.batch; r += kLossWarps) {
    const long at = static_cast<long>(r) * a.classes;
    loss += detail::softmax_xent_row(z + at, a.labels[r], dz + at, a.classes, a.grad_scale, lane);
  }
  if (lane == 0) warp_losses[warp] = loss;
  __syncthreads();
  if (writer) {
    if (threadIdx.x == 0) *a.loss_sum = detail::sum_warp_losses(warp_losses);
    for (int i = threadIdx.x; i < n_logits; i += kThreads)
      a.dlogits[i] = dz[i];
  }

  // 3. The backward products, one task per thread of the grid; each sum in the order the plain path's
  // kernels use.
  const int task = blockIdx.x * kThreads + threadIdx.x;
  const int columns = a.hidden;
  const int dw_count = a.classes * a.hidden;
  if (task < columns) {
    // dh[:, k] = dz w[:, k] masked by the ReLU (the fc2 input-gradient GEMM and its epilogue), and its sum
    // over the rows in row order (column_sums).
    const int k = task;
    float sum = 0.0f;
    for (int r = 0; r < a.batch; ++r) {
      const float* dz_row = dz + static_cast<long>(r) * a.classes;
      float acc = 0.0f;
      for (int c = 0; c < a.classes; ++c)
        acc = fmaf(dz_row[c], a.w[static_cast<long>(c) * a.hidden + k], acc);
      const long at = static_cast<long>(r) * a.hidden + k;
      const float g = a.h[at] <= 0.0f ? 0.0f : acc;  // written as the epilogue writes it: a NaN keeps acc
      a.dh[at] = g;
      sum += g;
    }
    a.dh_sums[k] = sum;
  } else if (task < columns + dw_count) {
    // dw[c, k] = sum over rows of dz[r, c] h[r, k] (the fc2 weight-gradient GEMM, k being its rows).
    const int i = task - columns;
    const int c = i / a.hidden;
    const int k = i % a.hidden;
    float acc = 0.0f;
    for (int r = 0; r < a.batch; ++r)
      acc = fmaf(dz[static_cast<long>(r) * a.classes + c], a.h[static_cast<long>(r) * a.hidden + k], acc);
    a.dw[i] = acc;
  } else if (task < columns + dw_count + a.classes) {
    // db[c]: column_sums of dz.
    const int c = task - columns - dw_count;
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

void classifier_head(const ClassifierHeadArgs& a, cudaStream_t stream) {
  if (a.batch < 0 || a.hidden < 1 || a.classes < 1) throw std::invalid_argument("classifier_head: bad shape");
  if (!classifier_head_fits(a.batch, a.classes)) {
    throw std::invalid_argument("classifier_head: " + std::to_string(a.batch) + " rows of " +
                                std::to_string(a.classes) +
                                " classes do not fit in one block's shared memory");
  }
  if (!a.h || !a.w || !a.b || !a.labels || !a.logits || !a.dlogits || !a.loss_sum || !a.dw || !a.db ||
      !a.dh || !a.dh_sums) {
    throw std::invalid_argument("classifier_head: null pointer");
  }
  const int tasks = a.hidden + a.classes * a.hidden + a.classes;
  const auto shared = static_cast<std::size_t>(shared_bytes(a.batch, a.classes));
  classifier_head_kernel<<<detail::ceil_div(tasks, kThreads), kThreads, shared, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace mnistdp::cuda
