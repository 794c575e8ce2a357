#include "host/cuda/cuda_step.hpp"

#include <utility>

#include "host/model/params.hpp"
#include "kernels/cuda/fused/classifier_head.hpp"
#include "kernels/cuda/ops/gather.hpp"
#include "kernels/cuda/ops/sgd.hpp"
#include "kernels/cuda/ops/softmax_xent.hpp"
#include "kernels/cuda/ops/step_cursor.hpp"
#include "kernels/cuda/runtime/check.hpp"

namespace mnistdp {
namespace {

using L = ParamLayout;

}  // namespace

CudaStep::CudaStep(const StepView& buffers, const StepKernels& kernels, DeviceTimeline* timeline)
    : b_(buffers), k_(kernels), timeline_(timeline) {}

void CudaStep::fc1_forward(int rows) const {
  const auto w = ParamViews<float>::of(b_.params);
  cuda::linear_forward(b_.x, w.fc1_weight, w.fc1_bias, b_.h, {rows, L::kInput, L::kHidden}, b_.activation,
                       k_.gemm, keeps_pre_activation(b_.activation) ? b_.z : nullptr);
}

void CudaStep::forward(int rows) const {
  fc1_forward(rows);
  const auto w = ParamViews<float>::of(b_.params);
  cuda::linear_forward(b_.h, w.fc2_weight, w.fc2_bias, b_.logits, {rows, L::kHidden, L::kClasses},
                       Activation::identity, k_.gemm);
}

void CudaStep::zero_gradients() {
  for (Mark m : {Mark::gather, Mark::forward, Mark::loss, Mark::backward})
    mark(m);
  CUDA_CHECK(cudaMemsetAsync(b_.grads, 0, L::kGradCount * sizeof(float), stream()));
  mark(Mark::backward_end);
}

void CudaStep::gradients(int first, int count, int global_batch, bool from_cursor) {
  const cudaStream_t s = stream();
  const auto w = ParamViews<float>::of(b_.params);
  const auto g = ParamViews<float>::of(b_.grads);

  mark(Mark::gather);
  if (from_cursor) {
    cuda::gather_normalize_at(b_.images, b_.labels, b_.order, b_.cursor, b_.x, b_.y, count, L::kInput, s);
  } else {
    cuda::gather_normalize(b_.images, b_.labels, b_.order + first, b_.x, b_.y, count, L::kInput, s);
  }
  // Scaled by 1 / global batch, not 1 / count: the replicas' gradients then sum to the global batch's.
  const float grad_scale = 1.0f / static_cast<float>(global_batch);
  mark(Mark::forward);
  if (k_.fused_head && cuda::classifier_head_fits(count, L::kClasses)) {
    // fc1's forward; one kernel from fc2's forward to fc1's bias gradient (the trace's "loss" span); fc1's
    // weight gradient.
    fc1_forward(count);
    mark(Mark::loss);
    enqueue_classifier_head(b_, count, grad_scale, s);
    ++counts_.head_steps;
    mark(Mark::backward);
    cuda::linear_backward(b_.dh, b_.x, w.fc1_weight, g.fc1_weight, nullptr, nullptr,
                          {count, L::kInput, L::kHidden}, Activation::identity, k_.gemm);
  } else {
    forward(count);
    mark(Mark::loss);
    cuda::softmax_xent(b_.logits, b_.y, b_.dlogits, b_.grads + L::kLossSlot, count, L::kClasses, grad_scale,
                       s);
    mark(Mark::backward);
    backward(count);
  }
  // Inside a graph: the next replay's rows start one global batch further on.
  if (from_cursor) cuda::advance_cursor(b_.cursor, global_batch, s);
  mark(Mark::backward_end);
}

void CudaStep::backward(int count) {
  const auto w = ParamViews<float>::of(b_.params);
  const auto g = ParamViews<float>::of(b_.grads);
  cuda::linear_backward(b_.dlogits, b_.h, w.fc2_weight, g.fc2_weight, g.fc2_bias, b_.dh,
                        {count, L::kHidden, L::kClasses}, b_.activation, k_.gemm, b_.z);
  cuda::linear_backward(b_.dh, b_.x, w.fc1_weight, g.fc1_weight, g.fc1_bias, nullptr,
                        {count, L::kInput, L::kHidden}, Activation::identity, k_.gemm);
}

void CudaStep::forward_logits(int first, int count) {
  mark(Mark::gather);
  if (count > 0)
    cuda::gather_normalize(b_.images, b_.labels, b_.order + first, b_.x, b_.y, count, L::kInput, stream());
  mark(Mark::forward);
  if (count > 0) forward(count);
  // The logits handed over: the "loss" span, device 0's, begins.
  mark(Mark::loss);
}

void CudaStep::batch_loss(const float* logits, const std::uint8_t* labels, float* dlogits, int rows,
                          int global_batch) {
  cuda::softmax_xent(logits, labels, dlogits, b_.grads + L::kLossSlot, rows, L::kClasses,
                     1.0f / static_cast<float>(global_batch), stream());
}

void CudaStep::backward_from_dlogits(int count) {
  mark(Mark::backward);
  if (count == 0)
    CUDA_CHECK(cudaMemsetAsync(b_.grads, 0, L::kCount * sizeof(float), stream()));
  else
    backward(count);
  mark(Mark::backward_end);
}

void CudaStep::sgd(const SgdConfig& cfg, bool first_step) {
  const bool with_momentum = cfg.momentum != 0.0f;
  mark(Mark::sgd);
  // After the all-reduce: the loss slot holds the global batch's sum, the same on every replica.
  cuda::sgd_step(b_.params, b_.grads, with_momentum ? b_.momentum : nullptr, L::kCount, cfg, first_step,
                 stream(), b_.watch ? b_.grads + L::kLossSlot : nullptr, b_.watch);
  mark(Mark::sgd_end);
}

void CudaStep::sgd_shard(const SgdConfig& cfg, bool first_step, std::size_t first, std::size_t count) {
  const bool with_momentum = cfg.momentum != 0.0f;
  mark(Mark::sgd);
  // The loss watch reads the loss slot, which the reduce-scatter summed into every replica.
  cuda::sgd_step(b_.params + first, b_.grads + first, with_momentum ? b_.momentum : nullptr, count, cfg,
                 first_step, stream(), b_.watch ? b_.grads + L::kLossSlot : nullptr, b_.watch);
  mark(Mark::sgd_end);
}

bool CudaStep::fused_step_takes(int count) const {
  return k_.fused_step && cuda::classifier_head_fits(count, L::kClasses);
}

void CudaStep::fused_step(int count, int global_batch, const SgdConfig& cfg, bool advance_cursor) {
  enqueue_fused_step(b_, count, global_batch, cfg, advance_cursor, k_.fused_order, stream());
  ++counts_.head_steps;
  ++counts_.fused_steps;
}

void CudaStep::persistent_steps(int count, int global_batch, const SgdConfig& cfg, int first, int steps,
                                long long* phase_cycles) {
  enqueue_persistent_steps(b_, count, global_batch, cfg, first, steps, k_.persistent_blocks, stream(),
                           phase_cycles);
  counts_.persistent_steps += steps;
  ++counts_.persistent_launches;
}

}  // namespace mnistdp
