#pragma once
// One tile of the fused step's first kernel (contract: kernels/cuda/fused/gather_linear.hpp), shared by its
// own launch (gather_linear.cu) and the persistent step (persistent_step.cu), which must give the same bits.
// CUDA-only (included by .cu files alone).
//
// GEMM v4's tile (kernels/cuda/gemm/slab.cuh) with its A operand staged from the uint8 pixels of the batch's
// rows: the tile normalises the 256 possible pixel values once into a table, with the gather's own
// normalize_pixel, and looks them up as it stages; the tiles of the first column also write the staged rows
// out as x (the weight gradient needs them) and the rows' labels as y.
#include "kernels/cuda/fused/gather_linear.hpp"
#include "kernels/cuda/gemm/slab.cuh"
#include "kernels/cuda/ops/normalize_pixel.cuh"

namespace mnistdp::cuda::detail {

// A tile's shared memory.
struct GatherLinearShared {
  long source[slab::kTileM];  // the data set's row of each of the tile's rows; -1 past the batch
  float normalised[256];      // [pixel value]
  slab::Slabs slabs;
};

// The table of normalised pixels, which reads no memory: a launch may fill it before waiting for the kernel
// before it.
__device__ __forceinline__ void fill_pixel_table(GatherLinearShared& s) {
  for (int p = static_cast<int>(threadIdx.x); p < 256; p += slab::kThreads)
    s.normalised[p] = normalize_pixel(static_cast<unsigned>(p));
}

// The tile (tile_col, tile_row) of h, and of x and y where tile_col is 0, for the rows order[first, first +
// a.batch). Threads 0 .. slab::kThreads - 1 call it, all of them, after fill_pixel_table; `barrier` is their
// barrier (all the block's threads in a block of slab::kThreads, or a named barrier of just these). kAct:
// a.activation, chosen by the launch.
template <Activation kAct, typename Barrier>
__device__ __forceinline__ void gather_linear_tile(const GatherLinearArgs& a, int first, int tile_col,
                                                   int tile_row, GatherLinearShared& s, Barrier barrier) {
  using namespace slab;
  const int tid = static_cast<int>(threadIdx.x);
  const int row0 = tile_row * kTileM;
  const int col0 = tile_col * kTileN;
  const bool writes_batch = tile_col == 0;
  if (tid < kTileM) {
    const int r = row0 + tid;
    s.source[tid] = r < a.batch ? a.order[first + r] : -1;
    if (writes_batch && r < a.batch) a.y[r] = a.labels[s.source[tid]];
  }
  barrier();

  float acc = 0.0f;
  for (int k0 = 0; k0 < a.in; k0 += kSlabK) {
    const int slab = min(kSlabK, a.in - k0);
    for (int ml = 0; ml < kTileM; ++ml) {  // along the row's pixels, as the gather reads them
      const long src = s.source[ml];
      const int r = row0 + ml;
      for (int kl = tid; kl < slab; kl += kThreads) {
        const float v = src >= 0 ? s.normalised[a.images[src * a.in + k0 + kl]] : 0.0f;
        s.slabs.a[ml][kl] = v;
        if (writes_batch && src >= 0) a.x[static_cast<long>(r) * a.in + k0 + kl] = v;
      }
    }
    stage_b<true>(s.slabs, a.w, a.in, a.out, col0, k0, slab);  // w is [out, in]: op(B) = w^T
    barrier();
    acc = accumulate(s.slabs, slab, acc);
    barrier();  // the next slab (or the next tile) overwrites these
  }

  const int row = row0 + ty();
  const int col = col0 + tx();
  if (row < a.batch && col < a.out) {
    a.h[static_cast<long>(row) * a.out + col] =
        apply_epilogue<kAct>(acc, row, col, a.b, /*mask=*/nullptr, /*pre=*/a.z, a.out);
  }
}

}  // namespace mnistdp::cuda::detail
