// The loss record's start (loss_watch.hpp). One thread: the cost is the launch, once a run.
#include "kernels/cuda/ops/loss_watch.hpp"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/launch.cuh"

namespace mnistdp::cuda {
namespace {

__global__ void start_loss_watch_kernel(LossWatch* __restrict__ watch,  // [1]
                                        long long next_step) {
  *watch = LossWatch{next_step, -1, 0.0f};
}

}  // namespace

void start_loss_watch(LossWatch* watch, long long next_step, cudaStream_t stream) {
  detail::launch<start_loss_watch_kernel>(1, 1, 0, stream, watch, next_step);
}

}  // namespace mnistdp::cuda
