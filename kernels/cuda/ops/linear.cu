// The linear layers as matrix products (kernels/cuda/gemm/gemm.hpp), plus the bias gradient. The three
// products of a layer are the three orientations of one GEMM:
//   forward  y  = x  w^T   (A = x [batch, in],   B = w [out, in] transposed)
//   weights  dw = dy^T x   (A = dy [batch, out] transposed, B = x [batch, in])
//   inputs   dx = dy w     (A = dy [batch, out], B = w [out, in])
#include <stdexcept>
#include <string>

#include "kernels/cuda/gemm/common.cuh"
#include "kernels/cuda/ops/linear.hpp"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/launch.cuh"

namespace mnistdp::cuda {
namespace {

constexpr int kColumnThreads = 128;

// One thread per column, walking down the rows in order: a fixed summation order, so the result is the same
// bit for bit on every run. The batch is at most a few hundred rows; a tree over rows would not pay here.
__global__ void __launch_bounds__(kColumnThreads)
    column_sums_kernel(const float* __restrict__ m,  // [rows, cols]
                       float* __restrict__ sums,     // [cols]
                       int rows, int cols) {
  const int col = blockIdx.x * kColumnThreads + threadIdx.x;
  if (col >= cols) return;
  float acc = 0.0f;
  for (int r = 0; r < rows; ++r)
    acc += m[static_cast<long>(r) * cols + col];
  sums[col] = acc;
}

void check_shape(LinearShape s) {
  if (s.batch < 0 || s.in < 0 || s.out < 0) throw std::invalid_argument("linear: negative size");
}

}  // namespace

void column_sums(const float* m, float* sums, int rows, int cols, cudaStream_t stream) {
  if (rows < 0 || cols < 0) throw std::invalid_argument("column_sums: negative size");
  if (cols == 0) return;
  detail::launch<column_sums_kernel>(detail::ceil_div(cols, kColumnThreads), kColumnThreads, 0, stream, m,
                                     sums, rows, cols);
}

void linear_forward(const float* x, const float* w, const float* b, float* y, LinearShape s, Activation act,
                    const GemmContext& ctx, float* z) {
  check_shape(s);
  GemmProblem p;
  p.m = s.batch;
  p.n = s.out;
  p.k = s.in;
  p.a = x;
  p.lda = s.in;
  p.b = w;
  p.ldb = s.in;
  p.trans_b = true;
  p.c = y;
  p.ldc = s.out;
  p.bias = b;
  p.activation = act;
  p.pre_activation = z;
  gemm(p, ctx.impl, ctx.stream, ctx.cublas);
}

void linear_backward(const float* dy, const float* x, const float* w, float* dw, float* db, float* dx,
                     LinearShape s, Activation act, const GemmContext& ctx, const float* z) {
  check_shape(s);
  GemmProblem weights;
  weights.m = s.out;
  weights.n = s.in;
  weights.k = s.batch;  // batch 0: an empty sum, dw = 0
  weights.a = dy;
  weights.lda = s.out;
  weights.trans_a = true;
  weights.b = x;
  weights.ldb = s.in;
  weights.c = dw;
  weights.ldc = s.in;
  gemm(weights, ctx.impl, ctx.stream, ctx.cublas);

  if (db) column_sums(dy, db, s.batch, s.out, ctx.stream);

  if (dx) {
    GemmProblem inputs;
    inputs.m = s.batch;
    inputs.n = s.in;
    inputs.k = s.out;
    inputs.a = dy;
    inputs.lda = s.out;
    inputs.b = w;
    inputs.ldb = s.in;
    inputs.c = dx;
    inputs.ldc = s.in;
    if (act != Activation::identity) {
      inputs.activation = act;
      inputs.mask = keeps_pre_activation(act) ? z : x;
      if (inputs.mask == nullptr)
        throw std::invalid_argument(std::string("linear_backward: ") + activation_name(act) +
                                    "'s derivative reads z, and z is null");
    }
    gemm(inputs, ctx.impl, ctx.stream, ctx.cublas);
  }
}

}  // namespace mnistdp::cuda
