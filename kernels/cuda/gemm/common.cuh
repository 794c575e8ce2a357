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

// The linear layers' epilogue: + bias, then the activation or, with a mask, its derivative; the order is
// part of the GemmProblem contract. The activation's functions are ref::linear_*'s own
// (kernels/ref/activations/), so that a NaN passes through the ReLU as in torch.relu, and a NaN in the
// mask keeps the gradient as in the reference.
template <Activation kAct>
__device__ __forceinline__ float apply_epilogue(float acc, int row, int col, const float* __restrict__ bias,
                                                const float* __restrict__ mask, float* __restrict__ pre,
                                                int ldc) {
  if (bias) acc += bias[col];
  if constexpr (kAct == Activation::identity) {
    return acc;
  } else {
    using A = ActivationFn<kAct>;
    const long at = static_cast<long>(row) * ldc + col;
    if (mask) return A::backward(acc, mask[at]);
    if constexpr (A::kReadsInput) {
      if (pre) pre[at] = acc;
    }
    return A::forward(acc);
  }
}

__host__ __device__ constexpr int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}

// What every version's entry point does: check the problem, launch nothing for an empty output, and call
// launch(std::bool_constant<trans_a>, std::bool_constant<trans_b>, std::integral_constant<Activation, a>) so
// that the kernel is compiled for each orientation and activation, both resolved at compile time.
template <typename Launch>
void validate_and_dispatch(const GemmProblem& p, Launch&& launch) {
  validate(p);
  if (p.m == 0 || p.n == 0) return;
  with_activation(p.activation, [&](auto act) {
    if (p.trans_a) {
      if (p.trans_b)
        launch(std::true_type{}, std::true_type{}, act);
      else
        launch(std::true_type{}, std::false_type{}, act);
    } else {
      if (p.trans_b)
        launch(std::false_type{}, std::true_type{}, act);
      else
        launch(std::false_type{}, std::false_type{}, act);
    }
  });
}

}  // namespace mnistdp::cuda::detail
