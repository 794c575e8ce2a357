#pragma once
// cub::BlockReduce's Sum, as the project uses it: every thread of the block calls it once with its value, and
// thread 0 receives the block's total. The values are added in thread order.
#include "emu/dialect.hpp"

namespace cub {

template <typename T, int kBlockThreads>
class BlockReduce {
 public:
  struct TempStorage {
    T values[kBlockThreads];
  };

  explicit BlockReduce(TempStorage& storage) : storage_(storage) {}

  T Sum(T value) {
    const dim3 b = blockDim;
    const uint3 t = threadIdx;
    const unsigned linear = t.x + b.x * (t.y + b.y * t.z);
    storage_.values[linear] = value;
    __syncthreads();
    T total{};
    if (linear == 0) {
      for (int i = 0; i < kBlockThreads; ++i)
        total += storage_.values[i];
    }
    return total;
  }

 private:
  TempStorage& storage_;
};

}  // namespace cub
