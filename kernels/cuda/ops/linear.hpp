#pragma once
// The linear layer on the device: the same contract as ref::linear_forward / ref::linear_backward
// (kernels/ref/linear.hpp), with the matrix products done by the chosen GemmImpl. Every launch goes on
// ctx.stream; nothing here synchronises with the host.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/gemm/gemm_version.hpp"
#include "kernels/ref/linear.hpp"

namespace mnistdp::cuda {

struct GemmContext {
  GemmImpl impl = GemmImpl::blocked;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;  // needed only when impl == GemmImpl::cublas
};

// x: [batch, in]  w: [out, in]  b: [out]  ->  y: [batch, out] = act(x w^T + b), the activation fused;
// z: [batch, out], x w^T + b, written where not nullptr and the activation reads its input. One launch (two
// for cuBLAS: the product, then bias and activation).
void linear_forward(const float* x, const float* w, const float* b, float* y, LinearShape s, Activation act,
                    const GemmContext& ctx, float* z = nullptr);

// dy: [batch, out]  x: [batch, in]  w: [out, in]
//   -> dw: [out, in] = dy^T x      db: [out] = column sums of dy; nullptr skips it (computed elsewhere)
//   -> dx: [batch, in] = dy w times the derivative of the activation x = act(z) came out of, read from x or,
//      where the activation reads its input, from z: [batch, in]; nullptr skips it (fc1 needs none)
// batch 0 gives dw = 0 and db = 0.
void linear_backward(const float* dy, const float* x, const float* w, float* dw, float* db, float* dx,
                     LinearShape s, Activation act, const GemmContext& ctx, const float* z = nullptr);

// m: [rows, cols] -> sums: [cols], each column summed over the rows in order (deterministic; rows = 0 gives
// 0).
void column_sums(const float* m, float* sums, int rows, int cols, cudaStream_t stream);

}  // namespace mnistdp::cuda
