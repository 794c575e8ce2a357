#include "kernels/cuda/thrust/host_system.hpp"

#include <thrust/system/cpp/execution_policy.h>

#include "kernels/cuda/thrust/thrust_ops.cuh"

namespace mnistdp::thrust_host {

void epoch_order(std::int32_t* order, std::uint64_t* keys, int count, std::uint64_t shuffle_seed) {
  thrust_ops::epoch_order(thrust::cpp::par, order, keys, count, shuffle_seed);
}

void mark_correct(const float* logits, const std::uint8_t* labels, std::uint8_t* correct, int rows,
                  int classes) {
  thrust_ops::mark_correct(thrust::cpp::par, logits, labels, correct, rows, classes);
}

long long count_marked(const std::uint8_t* marks, int count) {
  return thrust_ops::count_marked(thrust::cpp::par, marks, count);
}

double sum_in_double(const float* values, int count) {
  return thrust_ops::sum_in_double(thrust::cpp::par, values, count);
}

}  // namespace mnistdp::thrust_host
