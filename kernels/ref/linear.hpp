#pragma once
// A linear layer, y = x w^T + b, as PyTorch's nn.Linear stores it: w is [out, in], row-major.
//
// Two CPU implementations share these signatures (and the CUDA launchers in kernels/cuda/ops/linear.hpp
// mirror them):
//   ref::   plain loops, the definition every other implementation is checked against;
//   blas::  OpenBLAS's products with the rest fused into one pass, the peer that cpu::gemm was chosen over by
//           measurement (bench/cpu_ops_bench.cpp); the CPU training path itself is cpu::
//           (kernels/cpu/linear.hpp).
// Every output is overwritten, never accumulated into, and batch 0 is valid (a replica with no rows still
// produces gradients: zeros).

namespace mnistdp {

struct LinearShape {
  int batch;  // rows of x and y
  int in;     // features in
  int out;    // features out
};

namespace ref {

// x: [batch, in]  w: [out, in]  b: [out]  ->  y: [batch, out]; relu clamps y at 0 (fused epilogue)
void linear_forward(const float* x, const float* w, const float* b, float* y, LinearShape s, bool relu);

// dy: [batch, out]  x: [batch, in]  w: [out, in]
//   -> dw: [out, in] = dy^T x      db: [out] = column sums of dy
//   -> dx: [batch, in] = dy w, times (x > 0) when relu_mask (x is then the output of a ReLU); nullptr skips
//   dx
void linear_backward(const float* dy, const float* x, const float* w, float* dw, float* db, float* dx,
                     LinearShape s, bool relu_mask);

}  // namespace ref

namespace blas {

void linear_forward(const float* x, const float* w, const float* b, float* y, LinearShape s, bool relu);
void linear_backward(const float* dy, const float* x, const float* w, float* dw, float* db, float* dx,
                     LinearShape s, bool relu_mask);

// OpenBLAS's own thread pool; the trainer sets it from --threads.
void set_threads(int threads);

// The name of the kernels OpenBLAS picked for this CPU ("SkylakeX", "Haswell", ...): OpenBLAS chooses them by
// CPU model when it loads, and falls back to slow generic ones ("Prescott") on models it does not know; the
// OPENBLAS_CORETYPE environment variable overrides the choice.
const char* core_name();

}  // namespace blas

}  // namespace mnistdp
