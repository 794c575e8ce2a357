// The fused classifier head's share-out of its backward work (kernels/cuda/fused/classifier_head_split.hpp),
// walked over every thread of the grid on the CPU: each column of dh, each element of dw and each of db must
// be taken by exactly one thread, whatever the widths. The kernel itself runs only on a GPU.
#include <catch2/catch.hpp>

#include <vector>

#include "kernels/cuda/fused/classifier_head_split.hpp"

using namespace mnistdp::head_split;

TEST_CASE("the classifier head gives every backward task to exactly one thread", "[classifier_head]") {
  const int hidden = GENERATE(1, 31, 32, 33, 256, 300, 784);
  const int classes = GENERATE(1, 10, 33);
  CAPTURE(hidden, classes);
  const int dw_and_db = classes * hidden + classes;
  std::vector<int> columns(static_cast<std::size_t>(hidden), 0);
  std::vector<int> tasks(static_cast<std::size_t>(dw_and_db), 0);
  const int blocks = grid_blocks(hidden, classes);
  std::vector<bool> busy(static_cast<std::size_t>(blocks), false);
  for (int block = 0; block < blocks; ++block) {
    for (int thread = 0; thread < kThreads; ++thread) {
      if (block < column_warps(hidden) && thread < kWarpSize) {
        const int k = block * kWarpSize + thread;
        if (k < hidden) {
          ++columns[static_cast<std::size_t>(k)];
          busy[static_cast<std::size_t>(block)] = true;
        }
        continue;
      }
      const int task = other_task(block, thread, hidden);
      REQUIRE(task >= 0);
      if (task < dw_and_db) {
        ++tasks[static_cast<std::size_t>(task)];
        busy[static_cast<std::size_t>(block)] = true;
      }
    }
  }
  for (int k = 0; k < hidden; ++k) {
    CAPTURE(k);
    REQUIRE(columns[static_cast<std::size_t>(k)] == 1);
  }
  for (int t = 0; t < dw_and_db; ++t) {
    CAPTURE(t);
    REQUIRE(tasks[static_cast<std::size_t>(t)] == 1);
  }
  // No block beyond what the tasks need.
  for (int block = 0; block < blocks; ++block) {
    CAPTURE(block);
    CHECK(busy[static_cast<std::size_t>(block)]);
  }
}

TEST_CASE("the classifier head spreads the columns of dh one warp a block", "[classifier_head]") {
  // At SimpleNet's widths: 8 column warps in 8 blocks, 12 blocks in all (2,826 tasks of 256 threads).
  CHECK(column_warps(256) == 8);
  CHECK(grid_blocks(256, 10) == 12);
  CHECK(other_task(0, kWarpSize, 256) == 0);
  CHECK(other_task(1, kWarpSize, 256) == kThreads - kWarpSize);
  CHECK(other_task(8, 0, 256) == 8 * (kThreads - kWarpSize));
}
