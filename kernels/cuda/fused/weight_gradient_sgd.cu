// A layer's weight gradient and the SGD step of every parameter, in one launch (contract:
// kernels/cuda/fused/weight_gradient_sgd.hpp): a thread an item (weight_gradient_sgd_elements.cuh: a column
// of the weight gradient over 8 of its rows, or another parameter), in a grid-stride loop.
#include <algorithm>
#include <limits>
#include <stdexcept>

#include "kernels/cuda/fused/weight_gradient_sgd.hpp"
#include "kernels/cuda/fused/weight_gradient_sgd_elements.cuh"
#include "kernels/cuda/ops/loss_watch.cuh"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/programmatic_launch.cuh"

namespace mnistdp::cuda {
namespace {

// Blocks of 128: SimpleNet's 25,088 weight items and 2,826 others make 219 of them, so that every SM of an
// H200's 132 has work (blocks of 256 would leave 22 idle).
constexpr int kThreads = 128;
constexpr std::size_t kMaxBlocks = 8192;  // grid-stride beyond this

template <bool kVectorDy>
__global__ void __launch_bounds__(kThreads) weight_gradient_sgd_kernel(WeightGradientSgdArgs a) {
  detail::wait_for_previous_kernel();  // dy, the gradients and the offset come from the kernels before
  detail::weight_gradient_sgd_items<kVectorDy>(
      a, static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x),
      static_cast<int>(gridDim.x) * kThreads);
  // Every block of the step's earlier kernels has read the offset: this kernel's wait above returned once
  // they had finished (or, launched the serial way, it began after them).
  if (a.cursor && blockIdx.x == 0 && threadIdx.x == 0) *a.cursor += a.cursor_delta;
  // The same wait made the classifier head's loss sum final; the next step's head writes it only after this
  // kernel has finished (the step's first kernel is launched the serial way).
  if (a.watch && blockIdx.x == 0 && threadIdx.x == 0) detail::watch_loss(a.watch, *a.loss_sum);
}

}  // namespace

void validate(const WeightGradientSgdArgs& a, std::size_t index_stride) {
  if (a.batch < 0 || a.in < 0 || a.out < 0) throw std::invalid_argument("weight_gradient_sgd: negative size");
  const std::size_t weights = static_cast<std::size_t>(a.out) * static_cast<std::size_t>(a.in);
  if (a.n < weights)
    throw std::invalid_argument("weight_gradient_sgd: the buffers are shorter than the weights");
  if (a.n > static_cast<std::size_t>(std::numeric_limits<int>::max()) - index_stride)
    throw std::invalid_argument(
        "weight_gradient_sgd: more parameters than the kernel's 32-bit indices reach");
  if (!a.params || !a.grads || (a.batch > 0 && weights > 0 && (!a.dy || !a.x)))
    throw std::invalid_argument("weight_gradient_sgd: null pointer");
  if (a.sgd.momentum != 0.0f && !a.momentum)
    throw std::invalid_argument("weight_gradient_sgd: momentum != 0 needs a buffer");
  if (a.watch && !a.loss_sum)
    throw std::invalid_argument("weight_gradient_sgd: a loss record needs the loss sum");
}

void weight_gradient_sgd(const WeightGradientSgdArgs& a, cudaStream_t stream, LaunchOrder order) {
  validate(a, kMaxBlocks * kThreads);
  if (a.n == 0 && !a.cursor && !a.watch) return;
  const auto items = static_cast<std::size_t>(weight_items::item_count(a.out, a.in, static_cast<int>(a.n)));
  const dim3 grid(
      static_cast<unsigned>(std::clamp<std::size_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks)));
  if (detail::vector_dy_loads(a))
    detail::launch_in_order<weight_gradient_sgd_kernel<true>>(grid, dim3(kThreads), 0, stream, order, a);
  else
    detail::launch_in_order<weight_gradient_sgd_kernel<false>>(grid, dim3(kThreads), 0, stream, order, a);
}

}  // namespace mnistdp::cuda
