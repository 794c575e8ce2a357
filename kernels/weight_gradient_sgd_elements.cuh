#pragma once
// The elements of the fused step's last kernel (contract: weight_gradient_sgd_cuda.hpp), shared by its own
// launch (weight_gradient_sgd.cu) and the persistent step (persistent_step.cu), which must give the same
// bits. CUDA-only (included by .cu files alone).
//
// One thread per parameter: for the layer's weights it first sums the gradient, dw[o, j] = sum over rows of
// dy[r, o] x[r, j], rows ascending with fused multiply-adds from 0, as every hand-written GEMM sums an
// element; the others read theirs from the gradient buffer. Then the update is sgd_update.cuh's, as in the
// SGD kernel. A warp's threads hold consecutive j of one o: the loads of x coalesce and the load of dy is one
// broadcast.
#include "kernels/sgd_update.cuh"
#include "kernels/weight_gradient_sgd_cuda.hpp"

namespace mnistdp::cuda::detail {

// Parameters start, start + stride, ... below a.n, kPerPass of them side by side: a thread's sums are
// independent chains of multiply-adds, and a grid with few threads a parameter (the persistent step's)
// overlaps them rather than waiting on each load in turn. Each sum is the same, to the bit, whatever
// kPerPass. The caller checks that a.n + stride * kPerPass fits in an int. a.cursor is not moved here.
template <int kPerPass>
__device__ __forceinline__ void weight_gradient_sgd_elements(const WeightGradientSgdArgs& a, int start,
                                                             int stride) {
  // Not written by this function (the outputs are other buffers). (They do change between the persistent
  // step's phases, so the read-only cache, which is not kept coherent within a launch, must not serve them:
  // tests/ptx checks that the compiled code never asks it to.)
  const float* __restrict__ dy = a.dy;  // [batch, out]
  const float* __restrict__ x = a.x;    // [batch, in]
  const int n = static_cast<int>(a.n);
  const int weights = a.out * a.in;
  for (int base = start; base < n; base += stride * kPerPass) {
    bool weight[kPerPass];
    int o[kPerPass];  // the element's row of dw, a column of dy
    int j[kPerPass];  // its column of dw, a column of x
    float acc[kPerPass];
#pragma unroll
    for (int p = 0; p < kPerPass; ++p) {
      const int i = base + p * stride;
      weight[p] = i < weights;
      o[p] = weight[p] ? i / a.in : 0;
      j[p] = weight[p] ? i - o[p] * a.in : 0;
      acc[p] = 0.0f;
    }
    const float* __restrict__ dy_row = dy;  // dy[r, :]
    const float* __restrict__ x_row = x;    // x[r, :]
    for (int r = 0; r < a.batch; ++r, dy_row += a.out, x_row += a.in) {
#pragma unroll
      for (int p = 0; p < kPerPass; ++p) {
        if (weight[p]) acc[p] = fmaf(dy_row[o[p]], x_row[j[p]], acc[p]);
      }
    }
#pragma unroll
    for (int p = 0; p < kPerPass; ++p) {
      const int i = base + p * stride;
      if (i >= n) break;
      float g;
      if (weight[p]) {
        a.grads[i] = acc[p];
        g = acc[p];
      } else {
        g = a.grads[i];
      }
      a.params[i] = sgd_element(a.params[i], g, a.momentum ? a.momentum + i : nullptr, a.sgd, a.first_step);
    }
  }
}

}  // namespace mnistdp::cuda::detail
