#pragma once
// Device-side pieces shared by the GEMM versions: operand access with optional transposition, and the
// epilogue. CUDA-only (included by the .cu files alone).
#include <type_traits>

#include "kernels/cuda/gemm/gemm.hpp"

namespace mnistdp::cuda::detail {

// Element [row, col] of op(P), where P is row-major with leading dimension ld and op(P) = P^T when kTrans.
template <bool kTrans>
__device__ __forceinline__ float load_op(const float* __restrict__ p, int ld, int row, int col) {
  return kTrans ? p[static_cast<long>(col) * ld + row] : p[static_cast<long>(row) * ld + col];
}

// The linear layers' epilogue: + bias, ReLU, ReLU mask; the order is part of the GemmProblem contract. The
// comparisons are written as ref::linear_* writes them (v < 0, x <= 0), so that a NaN passes through the ReLU
// as in torch.relu, and a NaN in the mask keeps the gradient as in the reference.
__device__ __forceinline__ float apply_epilogue(float acc, int row, int col, const float* __restrict__ bias,
                                                bool relu, const float* __restrict__ mask, int ldc) {
  if (bias) acc += bias[col];
  if (relu && acc < 0.0f) acc = 0.0f;
  if (mask && mask[static_cast<long>(row) * ldc + col] <= 0.0f) acc = 0.0f;
  return acc;
}

__host__ __device__ constexpr int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}

// What every version's entry point does: check the problem, launch nothing for an empty output, and call
// launch(std::bool_constant<trans_a>, std::bool_constant<trans_b>) so that the kernel is compiled for each
// orientation, with the transposes resolved at compile time.
template <typename Launch>
void validate_and_dispatch(const GemmProblem& p, Launch&& launch) {
  validate(p);
  if (p.m == 0 || p.n == 0) return;
  if (p.trans_a) {
    if (p.trans_b)
      launch(std::true_type{}, std::true_type{});
    else
      launch(std::true_type{}, std::false_type{});
  } else {
    if (p.trans_b)
      launch(std::false_type{}, std::true_type{});
    else
      launch(std::false_type{}, std::false_type{});
  }
}

}  // namespace mnistdp::cuda::detail
