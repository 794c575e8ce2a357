// GEMM v4, k slabs: built for the small products of a batch-64 step, where v3 starves the GPU. v3's 64 x 64
// tiles give fc1's forward product (64 x 256 x 784) 4 blocks on a GPU of 132 SMs; v4 gives a block an 8 x 16
// tile, one element per thread as in v1 and v2 (128 blocks for that product), and stages the operands in
// slabs of 256 along k rather than v2's 16, so that a block waits for memory 4 times over k = 784 instead of
// 49. Each element is summed by one thread, k ascending, as in every other version: the same bits.
#include "kernels/cuda_check.hpp"
#include "kernels/gemm_common.cuh"

namespace mnistdp::cuda {
namespace {

constexpr int kTileM = 8;
constexpr int kTileN = 16;  // along the columns of C, so that a half-warp's stores coalesce
constexpr int kThreads = kTileM * kTileN;
constexpr int kSlabK = 256;
// Slabs are stored [row or column][k]. Each thread reads along k; a row length of 1 (mod 32) puts the 16
// columns a warp reads at one k in 16 distinct banks.
constexpr int kPad = 1;

template <bool kTransA, bool kTransB>
__global__ void __launch_bounds__(kThreads) gemm_slab_kernel(GemmProblem p) {
  __shared__ float slab_a[kTileM][kSlabK + kPad];  // rows of op(A), [m][k]
  __shared__ float slab_b[kTileN][kSlabK + kPad];  // columns of op(B), [n][k]

  const float* __restrict__ a = p.a;  // op(A): [m, k]
  const float* __restrict__ b = p.b;  // op(B): [k, n]
  const int tid = threadIdx.x;
  const int tx = tid % kTileN;
  const int ty = tid / kTileN;
  const int row0 = blockIdx.y * kTileM;
  const int col0 = blockIdx.x * kTileN;

  float acc = 0.0f;
  for (int k0 = 0; k0 < p.k; k0 += kSlabK) {
    const int slab = min(kSlabK, p.k - k0);
    // Stage the slabs, as far as this slab reaches along k (the products of a step have k as small as 10);
    // consecutive threads walk the operand's contiguous dimension so that reads coalesce.
    if constexpr (kTransA) {  // A stored [k, m]: along the tile's rows
      for (int idx = tid; idx < kTileM * slab; idx += kThreads) {
        const int ml = idx % kTileM;
        const int kl = idx / kTileM;
        const int r = row0 + ml;
        slab_a[ml][kl] = r < p.m ? detail::load_op<true>(a, p.lda, r, k0 + kl) : 0.0f;
      }
    } else {  // A stored [m, k]: along k, a row at a time
      for (int ml = 0; ml < kTileM; ++ml) {
        const int r = row0 + ml;
        for (int kl = tid; kl < slab; kl += kThreads)
          slab_a[ml][kl] = r < p.m ? detail::load_op<false>(a, p.lda, r, k0 + kl) : 0.0f;
      }
    }
    if constexpr (kTransB) {  // B stored [n, k]: along k, a column of op(B) at a time
      for (int nl = 0; nl < kTileN; ++nl) {
        const int c = col0 + nl;
        for (int kl = tid; kl < slab; kl += kThreads)
          slab_b[nl][kl] = c < p.n ? detail::load_op<true>(b, p.ldb, k0 + kl, c) : 0.0f;
      }
    } else {  // B stored [k, n]: along the tile's columns
      for (int idx = tid; idx < kTileN * slab; idx += kThreads) {
        const int nl = idx % kTileN;
        const int kl = idx / kTileN;
        const int c = col0 + nl;
        slab_b[nl][kl] = c < p.n ? detail::load_op<false>(b, p.ldb, k0 + kl, c) : 0.0f;
      }
    }
    __syncthreads();
    for (int kl = 0; kl < slab; ++kl)
      acc += slab_a[ty][kl] * slab_b[tx][kl];
    __syncthreads();  // the next slab overwrites these
  }

  const int row = row0 + ty;
  const int col = col0 + tx;
  if (row < p.m && col < p.n) {
    p.c[static_cast<long>(row) * p.ldc + col] =
        detail::apply_epilogue(acc, row, col, p.bias, p.relu, p.mask, p.ldc);
  }
}

template <bool kTransA, bool kTransB>
void launch(const GemmProblem& p, cudaStream_t stream) {
  const dim3 grid(detail::ceil_div(p.n, kTileN), detail::ceil_div(p.m, kTileM));
  gemm_slab_kernel<kTransA, kTransB><<<grid, kThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void gemm_v4_slab(const GemmProblem& p, cudaStream_t stream) {
  detail::validate_and_dispatch(p, [&](auto trans_a, auto trans_b) {
    launch<decltype(trans_a)::value, decltype(trans_b)::value>(p, stream);
  });
}

}  // namespace mnistdp::cuda
