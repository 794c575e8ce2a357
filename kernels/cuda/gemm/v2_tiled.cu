// GEMM v2, shared-memory tiling: a block computes a 16 x 16 tile of C. It walks k in steps of 16, each step
// staging a 16 x 16 tile of op(A) and one of op(B) in shared memory, so that every element fetched from
// global memory is used 16 times instead of once. Still one element of C per thread: each multiply-add costs
// two shared-memory loads, which is what v3 fixes.
#include "kernels/cuda/gemm/common.cuh"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/launch.cuh"
#include "kernels/cuda/runtime/portable_dialect.cuh"

namespace mnistdp::cuda {
namespace {

constexpr int kTile = 16;

template <bool kTransA, bool kTransB, Activation kAct>
__global__ void __launch_bounds__(kTile* kTile) gemm_tiled_kernel(GemmProblem p) {
  // tile_a[m][k] and tile_b[k][n]. The +1 pads each row so that the transposed stores below (a warp writing
  // down a column) fall in distinct banks.
  using Tile = float[kTile][kTile + 1];
  MNISTDP_SHARED(Tile, tile_a);
  MNISTDP_SHARED(Tile, tile_b);

  const float* __restrict__ a = p.a;  // op(A): [m, k]
  const float* __restrict__ b = p.b;  // op(B): [k, n]
  const int tx = threadIdx.x;
  const int ty = threadIdx.y;
  const int row0 = blockIdx.y * kTile;
  const int col0 = blockIdx.x * kTile;
  const int row = row0 + ty;
  const int col = col0 + tx;

  float acc = 0.0f;
  for (int k0 = 0; k0 < p.k; k0 += kTile) {
    // Each load has threadIdx.x run along the operand's contiguous dimension, so that a warp's reads coalesce
    // whether or not the operand is transposed; out-of-range elements are zero and add nothing.
    if constexpr (kTransA) {  // A stored [k, m]: contiguous along m
      const int r = row0 + tx, kk = k0 + ty;
      tile_a[tx][ty] = (r < p.m && kk < p.k) ? detail::load_op<true>(a, p.lda, r, kk) : 0.0f;
    } else {  // A stored [m, k]: contiguous along k
      const int r = row0 + ty, kk = k0 + tx;
      tile_a[ty][tx] = (r < p.m && kk < p.k) ? detail::load_op<false>(a, p.lda, r, kk) : 0.0f;
    }
    if constexpr (kTransB) {  // B stored [n, k]: contiguous along k
      const int kk = k0 + tx, c = col0 + ty;
      tile_b[tx][ty] = (kk < p.k && c < p.n) ? detail::load_op<true>(b, p.ldb, kk, c) : 0.0f;
    } else {  // B stored [k, n]: contiguous along n
      const int kk = k0 + ty, c = col0 + tx;
      tile_b[ty][tx] = (kk < p.k && c < p.n) ? detail::load_op<false>(b, p.ldb, kk, c) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTile; ++kk)
      acc = fmaf(tile_a[ty][kk], tile_b[kk][tx], acc);
    __syncthreads();  // the next step overwrites the tiles
  }
  if (row < p.m && col < p.n) {
    p.c[static_cast<long>(row) * p.ldc + col] =
        detail::apply_epilogue<kAct>(acc, row, col, p.bias, p.mask, p.pre_activation, p.ldc);
  }
}

template <bool kTransA, bool kTransB, Activation kAct>
void launch(const GemmProblem& p, cudaStream_t stream) {
  const dim3 block(kTile, kTile);
  const dim3 grid(detail::ceil_div(p.n, kTile), detail::ceil_div(p.m, kTile));
  detail::launch<gemm_tiled_kernel<kTransA, kTransB, kAct>>(grid, block, 0, stream, p);
}

}  // namespace

void gemm_v2_tiled(const GemmProblem& p, cudaStream_t stream) {
  detail::validate_and_dispatch(p, [&](auto trans_a, auto trans_b, auto act) {
    launch<decltype(trans_a)::value, decltype(trans_b)::value, decltype(act)::value>(p, stream);
  });
}

}  // namespace mnistdp::cuda
