// GEMM v3, register blocking: a block of 256 threads computes a 64 x 64 tile of C, each thread a 4 x 4
// sub-tile held in registers. Per step of k, a thread loads 4 values of op(A) and 4 of op(B) from shared
// memory and does 16 multiply-adds with them: a quarter of v2's shared-memory traffic per flop. A thread's 4
// x 4 elements are strided by 16 (rows ty, ty + 16, ...; columns tx, tx + 16, ...), so that a warp's
// shared-memory reads are conflict-free and its stores to C coalesce.
#include "kernels/cuda/gemm/common.cuh"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/launch.cuh"
#include "kernels/cuda/runtime/portable_dialect.cuh"

namespace mnistdp::cuda {
namespace {

constexpr int kBlockM = 64;
constexpr int kBlockN = 64;
constexpr int kBlockK = 16;
constexpr int kThreadsX = 16;  // along n
constexpr int kThreadsY = 16;  // along m
constexpr int kThreads = kThreadsX * kThreadsY;
constexpr int kThreadM = kBlockM / kThreadsY;  // 4
constexpr int kThreadN = kBlockN / kThreadsX;  // 4
// Shared tiles are k-major ([k][m] and [k][n]). Loads that run along k write down a column of such a tile; a
// row length of 2 (mod 32) spreads the 16 k of a half-warp over distinct even banks, the other half-warp over
// the odd ones.
constexpr int kPad = 2;

static_assert(kBlockM * kBlockK % kThreads == 0 && kBlockN * kBlockK % kThreads == 0);

template <bool kTransA, bool kTransB, Activation kAct>
__global__ void __launch_bounds__(kThreads) gemm_blocked_kernel(GemmProblem p) {
  using TileA = float[kBlockK][kBlockM + kPad];
  using TileB = float[kBlockK][kBlockN + kPad];
  MNISTDP_SHARED(TileA, tile_a);  // op(A) tile, [k][m]
  MNISTDP_SHARED(TileB, tile_b);  // op(B) tile, [k][n]

  const float* __restrict__ a = p.a;  // op(A): [m, k]
  const float* __restrict__ b = p.b;  // op(B): [k, n]
  const int tid = threadIdx.x;
  const int tx = tid % kThreadsX;
  const int ty = tid / kThreadsX;
  const int row0 = blockIdx.y * kBlockM;
  const int col0 = blockIdx.x * kBlockN;

  float acc[kThreadM][kThreadN] = {};
  for (int k0 = 0; k0 < p.k; k0 += kBlockK) {
    // Stage the tiles; consecutive threads walk the operand's contiguous dimension so that reads coalesce.
#pragma unroll
    for (int i = 0; i < kBlockM * kBlockK / kThreads; ++i) {
      const int idx = tid + i * kThreads;
      const int ml = kTransA ? idx % kBlockM : idx / kBlockK;  // A stored [k, m] when transposed, else [m, k]
      const int kl = kTransA ? idx / kBlockM : idx % kBlockK;
      const int r = row0 + ml, kk = k0 + kl;
      tile_a[kl][ml] = (r < p.m && kk < p.k) ? detail::load_op<kTransA>(a, p.lda, r, kk) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kBlockN * kBlockK / kThreads; ++i) {
      const int idx = tid + i * kThreads;
      const int nl = kTransB ? idx / kBlockK : idx % kBlockN;  // B stored [n, k] when transposed, else [k, n]
      const int kl = kTransB ? idx % kBlockK : idx / kBlockN;
      const int c = col0 + nl, kk = k0 + kl;
      tile_b[kl][nl] = (kk < p.k && c < p.n) ? detail::load_op<kTransB>(b, p.ldb, kk, c) : 0.0f;
    }
    __syncthreads();

#pragma unroll
    for (int kl = 0; kl < kBlockK; ++kl) {
      float av[kThreadM];
      float bv[kThreadN];
#pragma unroll
      for (int i = 0; i < kThreadM; ++i)
        av[i] = tile_a[kl][ty + i * kThreadsY];
#pragma unroll
      for (int j = 0; j < kThreadN; ++j)
        bv[j] = tile_b[kl][tx + j * kThreadsX];
#pragma unroll
      for (int i = 0; i < kThreadM; ++i) {
#pragma unroll
        for (int j = 0; j < kThreadN; ++j)
          acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
    }
    __syncthreads();  // the next step overwrites the tiles
  }

#pragma unroll
  for (int i = 0; i < kThreadM; ++i) {
    const int row = row0 + ty + i * kThreadsY;
    if (row >= p.m) continue;
#pragma unroll
    for (int j = 0; j < kThreadN; ++j) {
      const int col = col0 + tx + j * kThreadsX;
      if (col < p.n) {
        p.c[static_cast<long>(row) * p.ldc + col] =
            detail::apply_epilogue<kAct>(acc[i][j], row, col, p.bias, p.mask, p.pre_activation, p.ldc);
      }
    }
  }
}

template <bool kTransA, bool kTransB, Activation kAct>
void launch(const GemmProblem& p, cudaStream_t stream) {
  const dim3 grid(detail::ceil_div(p.n, kBlockN), detail::ceil_div(p.m, kBlockM));
  detail::launch<gemm_blocked_kernel<kTransA, kTransB, kAct>>(grid, kThreads, 0, stream, p);
}

}  // namespace

void gemm_v3_blocked(const GemmProblem& p, cudaStream_t stream) {
  detail::validate_and_dispatch(p, [&](auto trans_a, auto trans_b, auto act) {
    launch<decltype(trans_a)::value, decltype(trans_b)::value, decltype(act)::value>(p, stream);
  });
}

}  // namespace mnistdp::cuda
