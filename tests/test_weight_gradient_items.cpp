// How the fused step's last kernel cuts its work into items, and how the persistent step deals them to its
// blocks (kernels/cuda/fused/weight_gradient_items.hpp), walked on the CPU: every parameter must be taken by
// exactly one item, and every item by exactly one thread of the grid, whatever the shape and the grid. The
// kernels themselves run only on a GPU.
#include <catch2/catch.hpp>

#include <vector>

#include "kernels/cuda/fused/weight_gradient_items.hpp"

using namespace mnistdp::weight_items;

TEST_CASE("the last kernel's items take every parameter exactly once", "[fused_step]") {
  // SimpleNet's fc1 (256 x 784 in 203,530), rows in whole items, a last item of 4 rows, of 1 row, no inputs,
  // no outputs, no other parameters.
  struct Shape {
    int out, in, n;
  };
  const Shape shape =
      GENERATE(Shape{256, 784, 203530}, Shape{12, 5, 70}, Shape{20, 7, 150}, Shape{10, 33, 400},
               Shape{1, 1, 1}, Shape{3, 10, 40}, Shape{9, 0, 5}, Shape{0, 5, 7}, Shape{16, 3, 48});
  CAPTURE(shape.out, shape.in, shape.n);
  std::vector<int> taken(static_cast<std::size_t>(shape.n), 0);
  const int items = item_count(shape.out, shape.in, shape.n);
  REQUIRE(items <= shape.n);
  for (int index = 0; index < items; ++index) {
    const Item it = item(index, shape.out, shape.in);
    if (it.rows == 0) {
      REQUIRE(it.param >= shape.out * shape.in);
      REQUIRE(it.param < shape.n);
      ++taken[static_cast<std::size_t>(it.param)];
      continue;
    }
    REQUIRE(it.rows <= kRows);
    REQUIRE(it.row % kRows == 0);
    REQUIRE(it.column < shape.in);
    // Where the rows come in groups of 4, so do an item's: the vector loads of dy take 4 at a time.
    if (shape.out % 4 == 0) REQUIRE(it.rows % 4 == 0);
    for (int p = 0; p < it.rows; ++p) {
      REQUIRE(it.row + p < shape.out);
      ++taken[static_cast<std::size_t>((it.row + p) * shape.in + it.column)];
    }
  }
  for (int i = 0; i < shape.n; ++i) {
    CAPTURE(i);
    REQUIRE(taken[static_cast<std::size_t>(i)] == 1);
  }
}

TEST_CASE("the persistent step deals every item to exactly one thread, and to every block", "[persistent]") {
  constexpr int kThreads = 256;
  constexpr int kWarp = 32;
  const int blocks = GENERATE(1, 5, 132, 264);
  const int items = GENERATE(item_count(256, 784, 203530), 1, 31, 33, 40000);
  CAPTURE(blocks, items);
  std::vector<int> taken(static_cast<std::size_t>(items), 0);
  std::vector<bool> busy(static_cast<std::size_t>(blocks), false);
  for (int block = 0; block < blocks; ++block) {
    for (int thread = 0; thread < kThreads; ++thread) {
      for (int index = dealt_first_item(block, blocks, thread, kWarp); index < items;
           index += blocks * kThreads) {
        ++taken[static_cast<std::size_t>(index)];
        busy[static_cast<std::size_t>(block)] = true;
      }
    }
  }
  for (int i = 0; i < items; ++i) {
    CAPTURE(i);
    REQUIRE(taken[static_cast<std::size_t>(i)] == 1);
  }
  // Every block has work once there are a warp's worth of items for each.
  if (items >= blocks * kWarp)
    for (int block = 0; block < blocks; ++block) {
      CAPTURE(block);
      REQUIRE(busy[static_cast<std::size_t>(block)]);
    }
  // A warp's items are consecutive (the loads of x coalesce): lane l of a warp takes its run's item l.
  CHECK(dealt_first_item(3, blocks, 37, kWarp) == dealt_first_item(3, blocks, 32, kWarp) + 5);
}
