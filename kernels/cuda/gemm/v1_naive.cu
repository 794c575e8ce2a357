// GEMM v1, naive: one thread per element of C, each reading a row of op(A) and a column of op(B) straight
// from global memory. Correct for every shape and the baseline the later versions are measured against; its
// weakness is that each operand element is fetched from memory (or L1/L2) once per thread that needs it.
#include "kernels/cuda/gemm/common.cuh"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/launch.cuh"

namespace mnistdp::cuda {
namespace {

constexpr int kBlock = 16;  // 16 x 16 threads, x along the columns of C so that its stores coalesce

template <bool kTransA, bool kTransB, Activation kAct>
__global__ void __launch_bounds__(kBlock* kBlock) gemm_naive_kernel(GemmProblem p) {
  const int col = blockIdx.x * kBlock + threadIdx.x;
  const int row = blockIdx.y * kBlock + threadIdx.y;
  if (row >= p.m || col >= p.n) return;
  const float* __restrict__ a = p.a;  // op(A): [m, k]
  const float* __restrict__ b = p.b;  // op(B): [k, n]
  float acc = 0.0f;
  for (int kk = 0; kk < p.k; ++kk) {
    acc = fmaf(detail::load_op<kTransA>(a, p.lda, row, kk), detail::load_op<kTransB>(b, p.ldb, kk, col), acc);
  }
  p.c[static_cast<long>(row) * p.ldc + col] =
      detail::apply_epilogue<kAct>(acc, row, col, p.bias, p.mask, p.pre_activation, p.ldc);
}

template <bool kTransA, bool kTransB, Activation kAct>
void launch(const GemmProblem& p, cudaStream_t stream) {
  const dim3 block(kBlock, kBlock);
  const dim3 grid(detail::ceil_div(p.n, kBlock), detail::ceil_div(p.m, kBlock));
  detail::launch<gemm_naive_kernel<kTransA, kTransB, kAct>>(grid, block, 0, stream, p);
}

}  // namespace

void gemm_v1_naive(const GemmProblem& p, cudaStream_t stream) {
  detail::validate_and_dispatch(p, [&](auto trans_a, auto trans_b, auto act) {
    launch<decltype(trans_a)::value, decltype(trans_b)::value, decltype(act)::value>(p, stream);
  });
}

}  // namespace mnistdp::cuda
