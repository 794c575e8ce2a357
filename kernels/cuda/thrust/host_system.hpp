#pragma once
// The emulated build's Thrust: the CUDA path's algorithms (thrust_ops.cuh) run by Thrust's host system on
// emulated device memory, which is host memory. kernels/cuda/thrust/thrust_ops.cu queues them on a stream,
// where a GPU build runs the same algorithms on the device. Built apart from the emulation's stand-in headers
// (kernels/CMakeLists.txt): no CUDA type crosses this interface.
#include <cstdint>

namespace mnistdp::thrust_host {

void epoch_order(std::int32_t* order, std::uint64_t* keys, int count, std::uint64_t shuffle_seed);
void mark_correct(const float* logits, const std::uint8_t* labels, std::uint8_t* correct, int rows,
                  int classes);
long long count_marked(const std::uint8_t* marks, int count);
double sum_in_double(const float* values, int count);

}  // namespace mnistdp::thrust_host
