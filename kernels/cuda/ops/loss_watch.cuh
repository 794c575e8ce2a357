#pragma once
// The device side of loss_watch.hpp, for the kernels that end a step. CUDA-only (included by .cu files
// alone).
#include "kernels/cuda/ops/loss_watch.hpp"

namespace mnistdp::cuda::detail {

// One thread a step, once the step's loss sum (after the all-reduce: of the global batch, so that a replica
// whose own rows gave a finite loss still sees another's NaN) is final and before the next step writes it.
__device__ __forceinline__ void watch_loss(LossWatch* watch, float loss_sum) {
  // The largest float: a NaN compares false, an infinity greater.
  constexpr float kFloatMax = 3.40282347e+38f;
  if (!(fabsf(loss_sum) <= kFloatMax) && watch->first_bad < 0) {
    watch->first_bad = watch->next_step;
    watch->bad_loss_sum = loss_sum;
  }
  ++watch->next_step;
}

}  // namespace mnistdp::cuda::detail
