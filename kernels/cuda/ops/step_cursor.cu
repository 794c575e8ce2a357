// The device-side row offset of host/cuda/graph_step.cpp's step graphs (kernels/cuda/ops/step_cursor.hpp).
// One thread each: the cost is the launch (or the graph node), never the work.
#include "kernels/cuda/ops/step_cursor.hpp"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/launch.cuh"

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
