#pragma once
// How the fused step's last kernel cuts its work into items (weight_gradient_sgd_elements.cuh), and how the
// persistent step deals them to its blocks: in a header of its own, with no CUDA in it but the qualifiers,
// so that a CPU test can check that every parameter is taken exactly once, whatever the shape and the grid.
//
// The parameters are n floats, the layer's weights [out, in] first. Weight items come first: item g * in + j
// is column j of the weights over rows [g * kRows, min(out, (g + 1) * kRows)). Then one item per other
// parameter, in order.
#include "kernels/ref/host_device_function.hpp"

namespace mnistdp::weight_items {

inline constexpr int kRows = 8;

MNISTDP_HOST_DEVICE constexpr int weight_item_count(int out, int in) {
  return (out + kRows - 1) / kRows * in;
}

MNISTDP_HOST_DEVICE constexpr int item_count(int out, int in, int n) {
  return weight_item_count(out, in) + (n - out * in);
}

// What item `index` takes: rows > 0, the weights [row + p, column] for p < rows; rows == 0, the parameter
// `param`.
struct Item {
  int row = 0;
  int column = 0;
  int rows = 0;
  int param = 0;
};

MNISTDP_HOST_DEVICE constexpr Item item(int index, int out, int in) {
  Item it;
  const int weight_items = weight_item_count(out, in);
  if (index >= weight_items) {
    it.param = out * in + (index - weight_items);
    return it;
  }
  const int group = index / in;
  it.column = index - group * in;
  it.row = group * kRows;
  it.rows = out - it.row < kRows ? out - it.row : kRows;
  return it;
}

// The persistent step's first item for thread `thread` of block `block` in a grid of `blocks` (each thread
// then takes every blocks * threads_per_block-th): warp-wide runs of items dealt to the blocks in turn, run
// w of block b being run w * blocks + b, so that the runs reach every block rather than the first few.
MNISTDP_HOST_DEVICE constexpr int dealt_first_item(int block, int blocks, int thread, int warp_size) {
  return (thread / warp_size * blocks + block) * warp_size + thread % warp_size;
}

}  // namespace mnistdp::weight_items
