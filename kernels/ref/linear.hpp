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

#include "kernels/ref/activation.hpp"

namespace mnistdp {

struct LinearShape {
  int batch;  // rows of x and y
  int in;     // features in
  int out;    // features out
};

namespace ref {

// x: [batch, in]  w: [out, in]  b: [out]  ->  y: [batch, out] = act(x w^T + b) (a fused epilogue);
// z: [batch, out], the pre-activation x w^T + b, written where not nullptr (for a derivative that reads it)
void linear_forward(const float* x, const float* w, const float* b, float* y, LinearShape s, Activation act,
                    float* z = nullptr);

// dy: [batch, out]  x: [batch, in]  w: [out, in]
//   -> dw: [out, in] = dy^T x      db: [out] = column sums of dy
//   -> dx: [batch, in] = dy w, times act'(.) where x = act(z) is the output of an activation (identity:
//      none); the derivative read from x (ReLU: 0 where x <= 0) or, where the activation's row says it reads
//      its input, from z: [batch, in] (GELU). nullptr skips dx.
void linear_backward(const float* dy, const float* x, const float* w, float* dw, float* db, float* dx,
                     LinearShape s, Activation act, const float* z = nullptr);

}  // namespace ref

namespace blas {

// The activation as ref:: applies it, after OpenBLAS's product.
void linear_forward(const float* x, const float* w, const float* b, float* y, LinearShape s, Activation act,
                    float* z = nullptr);
void linear_backward(const float* dy, const float* x, const float* w, float* dw, float* db, float* dx,
                     LinearShape s, Activation act, const float* z = nullptr);

// OpenBLAS's own thread pool; the trainer sets it from --threads.
void set_threads(int threads);

// The name of the kernels OpenBLAS picked for this CPU ("SkylakeX", "Haswell", ...): OpenBLAS chooses them by
// CPU model when it loads, and falls back to slow generic ones ("Prescott") on models it does not know; the
// OPENBLAS_CORETYPE environment variable overrides the choice.
const char* core_name();

}  // namespace blas

}  // namespace mnistdp
