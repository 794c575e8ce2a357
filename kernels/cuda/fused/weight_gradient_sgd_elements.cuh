#pragma once
// The work of the fused step's last kernel (contract: kernels/cuda/fused/weight_gradient_sgd.hpp), shared by
// its own launch (weight_gradient_sgd.cu) and the persistent step (persistent_step.cu), which must give the
// same bits. CUDA-only (included by .cu files alone).
//
// The work is cut into items, one a thread at a time (weight_gradient_items.hpp): a weight item is a column j
// of the layer's dw over up to kRows rows o, dw[o, j] = sum over the batch's rows r of dy[r, o] x[r, j],
// each a chain of fused multiply-adds from 0, r ascending, as every hand-written GEMM sums an element (so
// with the same bits), followed by those weights' SGD steps; every other parameter is an item of its own,
// its SGD step with the gradient the earlier kernels wrote. Every update is sgd_update.cuh's, as in the SGD
// kernel.
//
// Why kRows rows an item: with one weight a thread, each multiply-add needs a load of x and one of dy, and at
// batch 64 those are 26 M loads a step, more than the multiply-adds' own issue time (docs/kernels.md). Here
// the kRows sums share each load of x[r, j]; a warp's threads hold consecutive j of one row group, so that
// load coalesces and dy's kRows values are the same for the whole warp, loaded as kRows / 4 broadcast
// vectors where dy's rows allow it (kVectorDy): 3 loads for 8 multiply-adds.
#include <cstdint>

#include "kernels/cuda/fused/weight_gradient_items.hpp"
#include "kernels/cuda/fused/weight_gradient_sgd.hpp"
#include "kernels/cuda/ops/sgd_update.cuh"

namespace mnistdp::cuda::detail {

static_assert(weight_items::kRows % 4 == 0, "the vector loads of dy take 4 rows at a time");

// Whether dy's rows allow the vector loads: 16-byte aligned, and whole groups of 4 floats.
inline bool vector_dy_loads(const WeightGradientSgdArgs& a) {
  return a.out % 4 == 0 && reinterpret_cast<std::uintptr_t>(a.dy) % 16 == 0;
}

// Items start, start + stride, ... (weight_items::item_count of them); kVectorDy as vector_dy_loads(a)
// says. The caller checks that a.n plus stride fits in an int. a.cursor is not moved here.
template <bool kVectorDy>
__device__ __forceinline__ void weight_gradient_sgd_items(const WeightGradientSgdArgs& a, int start,
                                                          int stride) {
  constexpr int kRows = weight_items::kRows;
  // Not written by this function (the outputs are other buffers). (They do change between the persistent
  // step's phases, so the read-only cache, which is not kept coherent within a launch, must not serve them:
  // tests/ptx checks that the compiled code never asks it to.)
  const float* __restrict__ dy = a.dy;  // [batch, out]
  const float* __restrict__ x = a.x;    // [batch, in]
  const int items = weight_items::item_count(a.out, a.in, static_cast<int>(a.n));
  float* momentum = a.momentum;
  for (int index = start; index < items; index += stride) {
    const weight_items::Item it = weight_items::item(index, a.out, a.in);
    if (it.rows == 0) {  // another parameter: its gradient is in the buffer
      const int i = it.param;
      a.params[i] =
          sgd_element(a.params[i], a.grads[i], momentum ? momentum + i : nullptr, a.sgd, a.first_step);
      continue;
    }
    float acc[kRows];
#pragma unroll
    for (int p = 0; p < kRows; ++p)
      acc[p] = 0.0f;
    // An empty batch sums nothing, and its dy and x may be null: no pointer is formed from them.
    if (a.batch > 0) {
      const float* __restrict__ dy_row = dy + it.row;  // dy[r, it.row ...]
      const float* __restrict__ x_at = x + it.column;  // x[r, it.column]
      for (int r = 0; r < a.batch; ++r, dy_row += a.out, x_at += a.in) {
        const float xv = *x_at;
        if constexpr (kVectorDy) {  // it.rows is then a multiple of 4
#pragma unroll
          for (int q = 0; q < kRows / 4; ++q) {
            if (4 * q >= it.rows) break;
            const float4 d = *reinterpret_cast<const float4*>(dy_row + 4 * q);
            acc[4 * q + 0] = fmaf(d.x, xv, acc[4 * q + 0]);
            acc[4 * q + 1] = fmaf(d.y, xv, acc[4 * q + 1]);
            acc[4 * q + 2] = fmaf(d.z, xv, acc[4 * q + 2]);
            acc[4 * q + 3] = fmaf(d.w, xv, acc[4 * q + 3]);
          }
        } else {
#pragma unroll
          for (int p = 0; p < kRows; ++p)
            if (p < it.rows) acc[p] = fmaf(dy_row[p], xv, acc[p]);
        }
      }
    }
#pragma unroll
    for (int p = 0; p < kRows; ++p) {
      if (p >= it.rows) break;
      const int i = (it.row + p) * a.in + it.column;
      a.grads[i] = acc[p];
      a.params[i] = sgd_element(a.params[i], acc[p], momentum ? momentum + i : nullptr, a.sgd, a.first_step);
    }
  }
}

}  // namespace mnistdp::cuda::detail
