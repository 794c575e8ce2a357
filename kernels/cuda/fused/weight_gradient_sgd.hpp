#pragma once
// The last kernel of the fused step (CudaStepOptions::fused_step): a layer's weight gradient and the SGD step
// of every parameter, in one launch. Only where the all-reduce is the identity (one replica, world size 1):
// the gradient it computes goes straight into the update, with no other rank's to add.
#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cuda/ops/loss_watch.hpp"
#include "kernels/cuda/runtime/launch_order.hpp"
#include "kernels/ref/sgd.hpp"

namespace mnistdp::cuda {

// dy: [batch, out] the layer's output gradient   x: [batch, in] its input
// params, grads, momentum: [n] flat buffers whose first out * in elements are the layer's weights, [out, in]
//   -> grads[0, out * in) = dy^T x, each element summed over the rows in order by one thread, as the
//      hand-written GEMMs sum it (so with the same bits)
//   -> every parameter takes one SGD step with its gradient, as cuda::sgd_step takes it (the same bits): the
//      rest of grads must already hold the other parameters' gradients
//   -> *cursor += cursor_delta, when cursor is given: the step graph's row offset, moved on by the step's
//      last kernel (host/cuda/cuda_replica.hpp)
//   -> the step's loss record (loss_watch.hpp) moved on by this step, when watch is given: loss_sum is then
//      the step's loss sum, final by the time this kernel runs
// momentum may be nullptr when cfg.momentum == 0. batch 0 gives a zero weight gradient. The one exception to
// "the same bits" is kernels/cuda/fused/classifier_head.hpp's: a sum of -0, which only underflow reaches,
// comes out +0 from tiled and blocked, -0 from here.
struct WeightGradientSgdArgs {
  const float* dy = nullptr;
  const float* x = nullptr;
  float* params = nullptr;
  float* grads = nullptr;
  float* momentum = nullptr;
  int batch = 0;
  int in = 0;
  int out = 0;
  std::size_t n = 0;
  SgdConfig sgd;
  bool first_step = false;  // torch.optim.SGD's first step with momentum: the buffer starts as the gradient
  int* cursor = nullptr;
  int cursor_delta = 0;
  const float* loss_sum = nullptr;  // [1] device memory, with watch
  LossWatch* watch = nullptr;       // [1] device memory, or nullptr
};

// Throws std::invalid_argument for what weight_gradient_sgd refuses. index_stride: the most a thread's index
// moves on at once in the launch's loop, which takes 32-bit indices: args.n plus it must fit in an int.
void validate(const WeightGradientSgdArgs& args, std::size_t index_stride);

// order: how the launch follows the kernel before it on the stream (launch_order.hpp); the same results
// either way.
void weight_gradient_sgd(const WeightGradientSgdArgs& args, cudaStream_t stream,
                         LaunchOrder order = LaunchOrder::serial);

}  // namespace mnistdp::cuda
