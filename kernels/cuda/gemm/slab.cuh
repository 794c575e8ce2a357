#pragma once
// The tiling of GEMM v4 (kernels/cuda/gemm/v4_slab.cu), shared with the fused step's first kernel
// (gather_linear.cu), which stages its A operand differently but must sum exactly as v4 does. CUDA-only
// (included by .cu files).
//
// A block of kThreads computes a kTileM x kTileN tile of C, one element per thread (row ty, column tx), and
// stages the operands in slabs of kSlabK along k: the tile's rows of op(A) and columns of op(B), each stored
// [row or column][k]. Rows are padded to kSlabK + 1 floats: at one k, the 16 columns a warp reads fall in 16
// distinct banks, and the 2 rows it reads are broadcast.
#include "kernels/cuda/gemm/common.cuh"

namespace mnistdp::cuda::detail::slab {

constexpr int kTileM = 8;
constexpr int kTileN = 16;  // along the columns of C, so that a half-warp's stores coalesce
constexpr int kThreads = kTileM * kTileN;
constexpr int kSlabK = 256;
constexpr int kPad = 1;

struct Slabs {
  float a[kTileM][kSlabK + kPad];  // rows of op(A), [m][k]
  float b[kTileN][kSlabK + kPad];  // columns of op(B), [n][k]
};

__device__ __forceinline__ int ty() {
  return static_cast<int>(threadIdx.x) / kTileN;
}
__device__ __forceinline__ int tx() {
  return static_cast<int>(threadIdx.x) % kTileN;
}

// Stages columns col0 .. col0 + kTileN - 1 of op(B) (zeros past n), k in [k0, k0 + slab); consecutive threads
// walk the operand's contiguous dimension so that reads coalesce.
template <bool kTransB>
__device__ __forceinline__ void stage_b(Slabs& s, const float* __restrict__ b, int ldb, int n, int col0,
                                        int k0, int slab) {
  const int tid = static_cast<int>(threadIdx.x);
  if constexpr (kTransB) {  // B stored [n, k]: along k, a column of op(B) at a time
    for (int nl = 0; nl < kTileN; ++nl) {
      const int c = col0 + nl;
      for (int kl = tid; kl < slab; kl += kThreads)
        s.b[nl][kl] = c < n ? load_op<true>(b, ldb, k0 + kl, c) : 0.0f;
    }
  } else {  // B stored [k, n]: along the tile's columns
    for (int idx = tid; idx < kTileN * slab; idx += kThreads) {
      const int nl = idx % kTileN;
      const int kl = idx / kTileN;
      const int c = col0 + nl;
      s.b[nl][kl] = c < n ? load_op<false>(b, ldb, k0 + kl, c) : 0.0f;
    }
  }
}

// This thread's element over one staged slab: k ascending, one fused multiply-add each (what the other
// versions' `acc += a * b` compiles to).
__device__ __forceinline__ float accumulate(const Slabs& s, int slab, float acc) {
  const int row = ty();
  const int col = tx();
  for (int kl = 0; kl < slab; ++kl)
    acc = fmaf(s.a[row][kl], s.b[col][kl], acc);
  return acc;
}

}  // namespace mnistdp::cuda::detail::slab
