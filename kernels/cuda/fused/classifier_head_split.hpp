#pragma once
// How the fused classifier head shares out its backward work over the grid (classifier_head.cu, phase 3): in
// a header of its own, with no CUDA in it but the qualifiers, so that a CPU test can check that every task is
// taken exactly once.
//
// A column of dh (with its sum, fc1's bias gradient) costs `classes` times an element of fc2's dw, so the
// columns go to warp 0 of blocks 0 .. column_warps - 1, 32 columns a warp and one such warp a block; every
// other thread of the grid, in order, takes an element of dw and then of db: other_task numbers them.
#include "kernels/ref/host_device_function.hpp"

namespace mnistdp::head_split {

inline constexpr int kWarpSize = 32;
inline constexpr int kThreads = 256;  // threads per block

MNISTDP_HOST_DEVICE constexpr int column_warps(int hidden) {
  return (hidden + kWarpSize - 1) / kWarpSize;
}

// The number of `thread` of `block` among the threads that are not column threads (for thread < kWarpSize
// of a block below column_warps, which are, the result means nothing).
MNISTDP_HOST_DEVICE constexpr int other_task(int block, int thread, int hidden) {
  // The column threads of the blocks up to and including this one.
  const int column_blocks = block + 1 < column_warps(hidden) ? block + 1 : column_warps(hidden);
  return block * kThreads + thread - kWarpSize * column_blocks;
}

// Enough blocks for the column warps, and enough threads besides them for every element of dw and db.
MNISTDP_HOST_DEVICE constexpr int grid_blocks(int hidden, int classes) {
  const int threads = column_warps(hidden) * kWarpSize + classes * hidden + classes;
  const int blocks = (threads + kThreads - 1) / kThreads;
  return blocks > column_warps(hidden) ? blocks : column_warps(hidden);
}

}  // namespace mnistdp::head_split
