// The device-side row offset of host/cuda/graph_step.cpp's step graphs (step_cursor_cuda.hpp). One thread
// each: the cost is the launch (or the graph node), never the work.
#include "kernels/cuda_check.hpp"
#include "kernels/kernel_launch.cuh"
#include "kernels/step_cursor_cuda.hpp"

namespace mnistdp::cuda {
namespace {

__global__ void set_cursor_kernel(int* __restrict__ cursor,  // [1]
                                  int value) {
  *cursor = value;
}

__global__ void advance_cursor_kernel(int* __restrict__ cursor,  // [1]
                                      int delta) {
  *cursor += delta;
}

}  // namespace

void set_cursor(int* cursor, int value, cudaStream_t stream) {
  detail::launch<set_cursor_kernel>(1, 1, 0, stream, cursor, value);
}

void advance_cursor(int* cursor, int delta, cudaStream_t stream) {
  detail::launch<advance_cursor_kernel>(1, 1, 0, stream, cursor, delta);
}

}  // namespace mnistdp::cuda
