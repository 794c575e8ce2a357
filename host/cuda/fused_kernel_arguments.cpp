#include "host/cuda/fused_kernel_arguments.hpp"

#include "host/model/params.hpp"
#include "kernels/cuda/fused/classifier_head.hpp"
#include "kernels/cuda/fused/gather_linear.hpp"
#include "kernels/cuda/fused/persistent_step.hpp"
#include "kernels/cuda/fused/weight_gradient_sgd.hpp"

namespace mnistdp {
namespace {

using L = ParamLayout;

// The three fused kernels' arguments for a step of `rows` rows, the rows' position from *b.cursor.
cuda::GatherLinearArgs gather_linear_args(const StepView& b, int rows) {
  const auto w = ParamViews<float>::of(b.params);
  cuda::GatherLinearArgs forward;
  forward.images = b.images;
  forward.labels = b.labels;
  forward.order = b.order;
  forward.first = b.cursor;
  forward.w = w.fc1_weight;
  forward.b = w.fc1_bias;
  forward.x = b.x;
  forward.y = b.y;
  forward.h = b.h;
  forward.z = b.z;
  forward.activation = b.activation;
  forward.batch = rows;
  forward.in = L::kInput;
  forward.out = L::kHidden;
  return forward;
}

cuda::ClassifierHeadArgs classifier_head_args(const StepView& b, int rows, float grad_scale) {
  const auto w = ParamViews<float>::of(b.params);
  const auto g = ParamViews<float>::of(b.grads);
  cuda::ClassifierHeadArgs head;
  head.h = b.h;
  head.z = b.z;
  head.activation = b.activation;
  head.w = w.fc2_weight;
  head.b = w.fc2_bias;
  head.labels = b.y;
  head.logits = b.logits;
  head.dlogits = b.dlogits;
  head.loss_sum = b.grads + L::kLossSlot;
  head.dw = g.fc2_weight;
  head.db = g.fc2_bias;
  head.dh = b.dh;
  head.dh_sums = g.fc1_bias;
  head.batch = rows;
  head.hidden = L::kHidden;
  head.classes = L::kClasses;
  head.grad_scale = grad_scale;
  return head;
}

cuda::WeightGradientSgdArgs weight_gradient_sgd_args(const StepView& b, int rows, const SgdConfig& cfg) {
  cuda::WeightGradientSgdArgs last;
  last.dy = b.dh;
  last.x = b.x;
  last.params = b.params;
  last.grads = b.grads;
  last.momentum = cfg.momentum != 0.0f ? b.momentum : nullptr;
  last.batch = rows;
  last.in = L::kInput;
  last.out = L::kHidden;
  last.n = L::kCount;
  last.sgd = cfg;
  last.loss_sum = b.grads + L::kLossSlot;
  last.watch = b.watch;
  return last;
}

float grad_scale(int global_batch) {
  return 1.0f / static_cast<float>(global_batch);
}

}  // namespace

void enqueue_classifier_head(const StepView& b, int rows, float grad_scale, cudaStream_t stream,
                             cuda::LaunchOrder order) {
  cuda::classifier_head(classifier_head_args(b, rows, grad_scale), stream, order);
}

void enqueue_fused_step(const StepView& b, int rows, int global_batch, const SgdConfig& cfg,
                        bool advance_cursor, cuda::LaunchOrder order, cudaStream_t stream) {
  cuda::gather_linear_forward(gather_linear_args(b, rows), stream);
  enqueue_classifier_head(b, rows, grad_scale(global_batch), stream, order);
  cuda::WeightGradientSgdArgs last = weight_gradient_sgd_args(b, rows, cfg);
  last.cursor = advance_cursor ? b.cursor : nullptr;
  last.cursor_delta = global_batch;
  cuda::weight_gradient_sgd(last, stream, order);
}

void enqueue_persistent_steps(const StepView& b, int rows, int global_batch, const SgdConfig& cfg, int first,
                              int steps, int blocks, cudaStream_t stream, long long* phase_cycles) {
  cuda::PersistentStepArgs args;
  args.forward = gather_linear_args(b, rows);
  args.head = classifier_head_args(b, rows, grad_scale(global_batch));
  args.last = weight_gradient_sgd_args(b, rows, cfg);
  args.first = first;
  args.stride = global_batch;
  args.steps = steps;
  args.phase_cycles = phase_cycles;
  cuda::persistent_steps(args, blocks, stream);
}

}  // namespace mnistdp
