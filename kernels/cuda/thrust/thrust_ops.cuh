#pragma once
// The CUDA path's Thrust algorithms, written once for any execution policy: on a GPU, the CUDA system's,
// queued on a replica's stream (kernels/cuda/thrust/thrust_ops.cu); in the emulated build, Thrust's host
// system over emulated device memory, which is host memory (kernels/cuda/thrust/host_system.cpp).
#include <thrust/count.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/sort.h>
#include <thrust/tabulate.h>
#include <thrust/transform.h>
#include <thrust/transform_reduce.h>

#include <cstdint>
#include <cuda/std/functional>

#include "kernels/ref/shuffle_keys.hpp"

namespace mnistdp::thrust_ops {

// order: [count] <- the rows sorted by their ShuffleKey (kernels/ref/shuffle_keys.hpp), host/model/init.cpp's
// epoch_order to the bit.  keys: [count], scratch. One radix sort of 64-bit keys on a GPU; the keys are
// distinct, so the sort needs no stability and no values beside them.
template <typename Policy>
void epoch_order(const Policy& policy, std::int32_t* order, std::uint64_t* keys, int count,
                 std::uint64_t shuffle_seed) {
  const ShuffleKey key{shuffle_seed, shuffle_row_bits(count)};
  thrust::tabulate(policy, keys, keys + count, key);
  thrust::sort(policy, keys, keys + count);
  thrust::transform(policy, keys, keys + count, order, RowOfKey{key.row_bits});
}

// Whether a row's argmax is its label: the first maximum wins, as in torch.argmax and ref::count_correct.
struct RowCorrect {
  const float* logits;         // [rows, classes]
  const std::uint8_t* labels;  // [rows]
  int classes;

  MNISTDP_HOST_DEVICE std::uint8_t operator()(int row) const {
    const float* z = logits + static_cast<long>(row) * classes;
    int best = 0;
    for (int c = 1; c < classes; ++c) {
      if (z[c] > z[best]) best = c;  // strictly greater: the first maximum wins
    }
    return static_cast<std::uint8_t>(best == labels[row]);
  }
};

// correct: [rows] <- 1 where the row's argmax is its label, else 0.
template <typename Policy>
void mark_correct(const Policy& policy, const float* logits, const std::uint8_t* labels,
                  std::uint8_t* correct, int rows, int classes) {
  thrust::transform(policy, thrust::counting_iterator<int>(0), thrust::counting_iterator<int>(rows), correct,
                    RowCorrect{logits, labels, classes});
}

// marks: [count], each 0 or 1 -> how many are 1.
template <typename Policy>
long long count_marked(const Policy& policy, const std::uint8_t* marks, int count) {
  return static_cast<long long>(thrust::count(policy, marks, marks + count, std::uint8_t{1}));
}

struct ToDouble {
  MNISTDP_HOST_DEVICE double operator()(float v) const { return static_cast<double>(v); }
};

// values: [count] -> their sum, each widened to double before it is added.
template <typename Policy>
double sum_in_double(const Policy& policy, const float* values, int count) {
  return thrust::transform_reduce(policy, values, values + count, ToDouble{}, 0.0,
                                  ::cuda::std::plus<double>{});
}

}  // namespace mnistdp::thrust_ops
