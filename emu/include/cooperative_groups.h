#pragma once
// The part of cooperative groups the project uses: the grid of a cooperative launch and its barrier.
#include "emu/dialect.hpp"

namespace cooperative_groups {

class grid_group {
 public:
  // Every thread of every block waits here until all have arrived; memory written before it is seen by all
  // after it. Refused in a kernel that was not launched cooperatively.
  void sync() const { ::mnistdp::emu::grid_sync(); }
  unsigned long long num_threads() const {
    const dim3 g = gridDim;
    const dim3 b = blockDim;
    return 1ull * g.x * g.y * g.z * b.x * b.y * b.z;
  }
};

inline grid_group this_grid() {
  return {};
}

}  // namespace cooperative_groups
