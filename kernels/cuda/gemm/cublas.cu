// GEMM through cuBLAS: the reference the hand-written versions are checked and timed against. cuBLAS is
// column-major; a row-major matrix read column-major is its transpose, so the row-major C = op(A) op(B) is
// the column-major C^T = op(B)^T op(A)^T: the same call with the operands swapped and m and n exchanged.
// cuBLAS has no bias/activation epilogue on this path, so a second, elementwise kernel applies it.
#include <algorithm>

#include "kernels/cuda/gemm/common.cuh"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/launch.cuh"

namespace mnistdp::cuda {
namespace {

constexpr int kThreads = 256;

template <Activation kAct>
__global__ void __launch_bounds__(kThreads)
    epilogue_kernel(float* __restrict__ c,           // [m, ldc]
                    const float* __restrict__ bias,  // [n] or nullptr
                    const float* __restrict__ mask,  // [m, ldc] or nullptr
                    float* __restrict__ pre,         // [m, ldc] or nullptr
                    int m, int n, int ldc) {
  const long total = static_cast<long>(m) * n;
  for (long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long>(gridDim.x) * blockDim.x) {
    const int row = static_cast<int>(i / n);
    const int col = static_cast<int>(i % n);
    float* out = c + static_cast<long>(row) * ldc + col;
    *out = detail::apply_epilogue<kAct>(*out, row, col, bias, mask, pre, ldc);
  }
}

}  // namespace

void gemm_cublas(const GemmProblem& p, cublasHandle_t handle, cudaStream_t stream) {
  validate(p);
  if (p.m == 0 || p.n == 0) return;
  if (p.k == 0) {
    // An empty sum: C = 0, then the epilogue. Done by hand rather than trusting cuBLAS's k = 0 path.
    CUDA_CHECK(cudaMemset2DAsync(p.c, sizeof(float) * p.ldc, 0, sizeof(float) * p.n, p.m, stream));
  } else {
    CUBLAS_CHECK(cublasSetStream(handle, stream));
    const float one = 1.0f;
    const float zero = 0.0f;
    CUBLAS_CHECK(cublasSgemm(handle, p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                             p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, p.n, p.m, p.k, &one, p.b, p.ldb, p.a,
                             p.lda, &zero, p.c, p.ldc));
  }
  if (p.bias || p.activation != Activation::identity) {
    const long total = static_cast<long>(p.m) * p.n;
    const int blocks = static_cast<int>(std::min<long>((total + kThreads - 1) / kThreads, 65535));
    with_activation(p.activation, [&](auto act) {
      detail::launch<epilogue_kernel<decltype(act)::value>>(blocks, kThreads, 0, stream, p.c, p.bias, p.mask,
                                                            p.pre_activation, p.m, p.n, p.ldc);
    });
  }
}

}  // namespace mnistdp::cuda
