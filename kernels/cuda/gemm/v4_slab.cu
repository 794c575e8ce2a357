// GEMM v4, k slabs: built for the small products of a batch-64 step, where v3 starves the GPU. v3's 64 x 64
// tiles give fc1's forward product (64 x 256 x 784) 4 blocks on a GPU of 132 SMs; v4 gives a block an 8 x 16
// tile, one element per thread as in v1 and v2 (128 blocks for that product), and stages the operands in
// slabs of 256 along k rather than v2's 16, so that a block waits for memory 4 times over k = 784 instead of
// 49. Each element is summed by one thread, k ascending, as in every other version: the same bits. The
// tiling, the staging of B and the sum are kernels/cuda/gemm/slab.cuh's, shared with the fused step's first
// kernel.
#include "kernels/cuda/gemm/common.cuh"
#include "kernels/cuda/gemm/slab.cuh"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/launch.cuh"
#include "kernels/cuda/runtime/portable_dialect.cuh"

namespace mnistdp::cuda {
namespace {

using namespace detail::slab;

template <bool kTransA, bool kTransB, Activation kAct>
__global__ void __launch_bounds__(kThreads) gemm_slab_kernel(GemmProblem p) {
  MNISTDP_SHARED(Slabs, s);
  const float* __restrict__ a = p.a;  // op(A): [m, k]
  const int tid = static_cast<int>(threadIdx.x);
  const int row0 = static_cast<int>(blockIdx.y) * kTileM;
  const int col0 = static_cast<int>(blockIdx.x) * kTileN;

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
        s.a[ml][kl] = r < p.m ? detail::load_op<true>(a, p.lda, r, k0 + kl) : 0.0f;
      }
    } else {  // A stored [m, k]: along k, a row at a time
      for (int ml = 0; ml < kTileM; ++ml) {
        const int r = row0 + ml;
        for (int kl = tid; kl < slab; kl += kThreads)
          s.a[ml][kl] = r < p.m ? detail::load_op<false>(a, p.lda, r, k0 + kl) : 0.0f;
      }
    }
    stage_b<kTransB>(s, p.b, p.ldb, p.n, col0, k0, slab);
    __syncthreads();
    acc = accumulate(s, slab, acc);
    __syncthreads();  // the next slab overwrites these
  }

  const int row = row0 + ty();
  const int col = col0 + tx();
  if (row < p.m && col < p.n) {
    p.c[static_cast<long>(row) * p.ldc + col] =
        detail::apply_epilogue<kAct>(acc, row, col, p.bias, p.mask, p.pre_activation, p.ldc);
  }
}

template <bool kTransA, bool kTransB, Activation kAct>
void launch(const GemmProblem& p, cudaStream_t stream) {
  const dim3 grid(detail::ceil_div(p.n, kTileN), detail::ceil_div(p.m, kTileM));
  detail::launch<gemm_slab_kernel<kTransA, kTransB, kAct>>(grid, kThreads, 0, stream, p);
}

}  // namespace

void gemm_v4_slab(const GemmProblem& p, cudaStream_t stream) {
  detail::validate_and_dispatch(p, [&](auto trans_a, auto trans_b, auto act) {
    launch<decltype(trans_a)::value, decltype(trans_b)::value, decltype(act)::value>(p, stream);
  });
}

}  // namespace mnistdp::cuda
