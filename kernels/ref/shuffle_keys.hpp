#pragma once
// The keys that put an epoch's training rows in order, the same on the host (host/model/init.cpp, sorted with
// std::sort) and on a device (kernels/cuda/thrust/thrust_ops.cu, sorted by Thrust): the epoch's permutation
// is the rows sorted by their keys. No CUDA in this header, so that CPU code and tests include it too.
#include <bit>
#include <cstdint>

#include "kernels/ref/host_device_function.hpp"

namespace mnistdp {

// The bits that hold a row index of a training set of `count` rows.
inline int shuffle_row_bits(int count) {
  return count <= 1 ? 0 : std::bit_width(static_cast<std::uint32_t>(count - 1));
}

// Row `row`'s key: the row-th output of splitmix64 seeded with the epoch's shuffle seed (what Rng(seed) gives
// at its (row + 1)-th call, computed from the counter alone, so every row's key is independent of the
// others'), with the row index in its low `row_bits` bits. The keys of distinct rows are then distinct, so
// any sort, stable or not, on any system, orders them the same way: by the random high bits, and by row
// index where those are equal.
struct ShuffleKey {
  std::uint64_t shuffle_seed;
  int row_bits;

  MNISTDP_HOST_DEVICE std::uint64_t operator()(std::uint64_t row) const {
    std::uint64_t z = shuffle_seed + (row + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return ((z >> row_bits) << row_bits) | row;
  }
};

// The row a sorted key stands for.
struct RowOfKey {
  int row_bits;

  MNISTDP_HOST_DEVICE std::int32_t operator()(std::uint64_t key) const {
    return static_cast<std::int32_t>(key & ((std::uint64_t{1} << row_bits) - 1));
  }
};

}  // namespace mnistdp
