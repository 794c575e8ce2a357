#pragma once
// Single-precision matrix products on the device, in every version this project keeps, with the epilogue a
// linear layer needs fused in (bias, activation, the activation's derivative). Host-includable: no CUDA
// syntax here.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/gemm/gemm_version.hpp"
#include "kernels/ref/activation.hpp"

namespace mnistdp::cuda {

// C[m, n] = op(A)[m, k] op(B)[k, n], every matrix row-major with the given leading dimension (row stride).
// op(A) = A^T when trans_a: A is then stored [k, lda]; likewise B is stored [n, ldb] when trans_b.
// The epilogue runs on each element, in this order: + bias[col]; then, without a mask, the forward pass's
// activation (v = C + bias stored in pre_activation first where that is set), or, with a mask, the backward
// pass's C = activation.backward(C, mask[row, col]), mask holding what the activation's row says its
// derivative reads (ReLU: its output h, so C = 0 where h <= 0; GELU: its input z). Each version is compiled
// once per activation (kernels/ref/activation.hpp), so an identity or ReLU epilogue is what it always was.
// Every element of C is overwritten (never accumulated into); k = 0 is valid and yields the epilogue of 0.
struct GemmProblem {
  int m = 0;
  int n = 0;
  int k = 0;
  const float* a = nullptr;  // [m, lda], or [k, lda] when trans_a
  int lda = 0;
  bool trans_a = false;
  const float* b = nullptr;  // [k, ldb], or [n, ldb] when trans_b
  int ldb = 0;
  bool trans_b = false;
  float* c = nullptr;  // [m, ldc]
  int ldc = 0;
  const float* bias = nullptr;  // [n], or nullptr
  Activation activation = Activation::identity;
  float* pre_activation = nullptr;  // [m, ldc] (same layout as c), or nullptr; only where no mask is given
  const float* mask = nullptr;      // [m, ldc] (same layout as c), or nullptr
};

// Throws std::invalid_argument when the problem's sizes or strides are inconsistent.
void validate(const GemmProblem& p);

// v1: one thread per element of C, operands straight from global memory.
void gemm_v1_naive(const GemmProblem& p, cudaStream_t stream);
// v2: 16 x 16 tiles of A and B staged in shared memory; one element of C per thread.
void gemm_v2_tiled(const GemmProblem& p, cudaStream_t stream);
// v3: 64 x 64 tiles of C per block, 4 x 4 per thread held in registers; operands staged in shared memory.
void gemm_v3_blocked(const GemmProblem& p, cudaStream_t stream);
// v4: 8 x 16 tiles of C per block, one element per thread; operands staged in slabs of 256 along k. For the
// small products of a training step, where v3's large tiles leave most of the GPU idle.
void gemm_v4_slab(const GemmProblem& p, cudaStream_t stream);
// cublasSgemm (plain fp32, no TF32), then the epilogue as a separate kernel. Sets the handle's stream.
void gemm_cublas(const GemmProblem& p, cublasHandle_t handle, cudaStream_t stream);

// Dispatches to one of the above; handle is needed (non-null) for GemmImpl::cublas only.
void gemm(const GemmProblem& p, GemmImpl impl, cudaStream_t stream, cublasHandle_t handle);

}  // namespace mnistdp::cuda
