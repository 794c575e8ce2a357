#pragma once
// The CPU path's matrix product, written for the shapes of one training step and chosen by what the CPU can
// do (its instruction set extensions), never by its model name.
//
// One form serves every product of a step: C[m, n] = A[m, k] B[k, n], all row-major, in which A is read one
// element at a time and broadcast, and B and C a row at a time, as vectors. The step keeps its activations
// feature-major ([features, rows]), so that every product takes this form with the weights in PyTorch's
// [out, in] layout as A (kernels/cpu/linear.hpp). Each element of C is one accumulator summed over k in order
// 0, 1, ..., k-1 with fused multiply-adds (where the CPU has them), whatever the blocking: the result does
// not depend on the tile sizes or on how the rows are split among calls.
#include <cstddef>

#include "kernels/ref/activation.hpp"

namespace mnistdp::cpu {

// The instruction sets the product is written for, from the widest.
enum class Isa {
  avx512,    // 16 floats a vector, masked loads and stores (AVX-512F)
  avx2,      // 8 floats a vector, FMA3
  portable,  // plain C++, for any other CPU
};

// The widest instruction set this CPU and operating system support.
Isa best_isa();
// "AVX-512", "AVX2+FMA", "portable C++".
const char* isa_name(Isa isa);

// What is done to each element of C after its sum, in this order.
struct Epilogue {
  const float* row_bias = nullptr;  // [m]: C[i, j] += row_bias[i]
  // identity or relu: C = C < 0 ? 0 : C (a NaN passes through), as a vector operation. The activations
  // without a vector form here are applied by the caller, in a pass of its own (cpu::linear_forward).
  Activation activation = Activation::identity;
  // [m, n] with row stride mask_stride: C[i, j] = mask[i, j] <= 0 ? 0 : C[i, j], ReLU's gradient where
  // mask is the ReLU's output.
  const float* mask = nullptr;
  std::ptrdiff_t mask_stride = 0;
  // Where set, C is a gradient that is not stored but applied at once, one step of torch.optim.SGD without
  // momentum: sgd_params[i, j] (row stride sgd_stride) -= lr (C[i, j] + weight_decay sgd_params[i, j]), each
  // operation rounded as ref::sgd_step rounds it (the weight decay's two only where it is not 0). C then
  // holds only partial sums between passes over k, and is left undefined.
  float* sgd_params = nullptr;
  std::ptrdiff_t sgd_stride = 0;
  float sgd_lr = 0.0f;
  float sgd_weight_decay = 0.0f;
};

struct Gemm {
  int m = 0, n = 0, k = 0;
  // A[i, l] = a[i * a_row_stride + l * a_col_stride]; a_row_stride = 1 and a_col_stride = m reads a stored
  // [k, m] matrix as its transpose.
  const float* a = nullptr;
  std::ptrdiff_t a_row_stride = 0, a_col_stride = 1;
  const float* b = nullptr;  // [k, n], row stride ldb
  std::ptrdiff_t ldb = 0;
  float* c = nullptr;  // [m, n], row stride ldc; overwritten
  std::ptrdiff_t ldc = 0;
  Epilogue epilogue;
};

// C = A B, then the epilogue, with the given instruction set (which this CPU must support); an epilogue's
// activation other than identity and relu is refused (std::invalid_argument). m, n or k may be
// 0: with k = 0, C is the epilogue applied to zeros. Built without contraction (kernels/CMakeLists.txt): the
// epilogue's sums and products are rounded one by one.
void gemm(Isa isa, const Gemm& g);

// Instruction-set versions, each compiled for its own target (kernels/cpu/gemm_*.cpp); call gemm() instead.
void gemm_avx512(const Gemm& g);
void gemm_avx2(const Gemm& g);
void gemm_portable(const Gemm& g);

}  // namespace mnistdp::cpu
