#pragma once
// One replica's training step as launches on its buffers and its stream, written once: the plain step
// (gather, forward, loss, backward, then SGD), the fused classifier head within it, the fused step and the
// persistent kernel. CudaReplica launches every step through it, and so does mnist-dp-bench. When the
// launches reach the device is a way of launching's business (step_launch.hpp): at once, captured into a
// graph and replayed, queued with other steps, or inside one persistent kernel. A CudaStep owns none of the
// buffers it launches on.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "host/cuda/device_timeline.hpp"
#include "host/cuda/fused_kernel_arguments.hpp"
#include "host/training/trace.hpp"
#include "kernels/cuda/ops/linear.hpp"
#include "kernels/cuda/runtime/launch_order.hpp"
#include "kernels/ref/sgd.hpp"

namespace mnistdp {

// Which kernels a step launches, beside the buffers they work on.
struct StepKernels {
  cuda::GemmContext gemm;  // the matrix products' version, the stream every launch goes on, cuBLAS's handle
  // The classifier head in one kernel (kernels/cuda/fused/classifier_head.hpp), for shards it takes.
  bool fused_head = false;
  // The whole step in three kernels, for the shards the head takes (fused_step()).
  bool fused_step = false;
  // How the fused step's second and third kernels follow the one before.
  cuda::LaunchOrder fused_order = cuda::LaunchOrder::serial;
  // The persistent kernel's grid (cuda::persistent_steps); 0 where it is not used.
  int persistent_blocks = 0;
};

// The steps, or launches, that took each fused path: counted when launched or captured (a replay runs what
// was captured, and is not counted).
struct FusedStepCounts {
  long head_steps = 0;  // gradients with the fused classifier head, the fused step's included
  long fused_steps = 0;
  long persistent_steps = 0;
  long persistent_launches = 0;
};

class CudaStep {
 public:
  // buffers: the replica's (every activation of at least as many rows as any step it is given); timeline:
  // where the traced steps' marks go (the replica's), or null for none.
  CudaStep(const StepView& buffers, const StepKernels& kernels, DeviceTimeline* timeline = nullptr);

  // The activations have moved (they grew): the launches from now on use these.
  void set_buffers(const StepView& buffers) { b_ = buffers; }
  const StepView& buffers() const { return b_; }
  const StepKernels& kernels() const { return k_; }
  cudaStream_t stream() const { return k_.gemm.stream; }
  const FusedStepCounts& counts() const { return counts_; }

  // The forward pass of `rows` rows already gathered into x: h (and z where the activation keeps it), then
  // the logits.
  void forward(int rows) const;
  // The gradients of rows order[first, first + count), count > 0, scaled by 1 / global_batch, into the
  // gradient buffer with the loss sum in its last slot. from_cursor: the rows' position is read from
  // *cursor (as a graph needs: its arguments are frozen) instead of taken from `first`, and the cursor moved
  // on by global_batch.
  void gradients(int first, int count, int global_batch, bool from_cursor);
  // A shard without rows: zeros in the gradient buffer, the loss slot included, with the step's marks.
  void zero_gradients();
  // torch.optim.SGD's step on the gradient buffer as it stands (all-reduced by then), which also moves the
  // loss record on; first_step: the first with momentum, which starts the buffer.
  void sgd(const SgdConfig& cfg, bool first_step);
  // ZeRO-1's: the parameters [first, first + count) alone, the view's momentum buffer holding that shard's.
  void sgd_shard(const SgdConfig& cfg, bool first_step, std::size_t first, std::size_t count);

  // nn.DataParallel's pieces (Replica::forward_logits, batch_loss, backward_from_dlogits), the plain
  // launches: the gather of rows order[first, first + count) and the forward pass to the logits (and y);
  // the loss of `rows` gathered rows, mean over them, into dlogits and the loss slot; the backward pass from
  // the dlogits buffer into the parameters' gradients (zeros for count 0).
  void forward_logits(int first, int count);
  void batch_loss(const float* logits, const std::uint8_t* labels, float* dlogits, int rows,
                  int global_batch);
  void backward_from_dlogits(int count);

  // Whether fused_step() takes a shard of `count` rows.
  bool fused_step_takes(int count) const;
  // The whole step of a lone replica (no all-reduce between) as three kernels, rows from *cursor;
  // advance_cursor: the last kernel moves the cursor on by global_batch (a benchmark repeating one batch
  // leaves it). No timeline marks: traced steps run the plain way.
  void fused_step(int count, int global_batch, const SgdConfig& cfg, bool advance_cursor = true);
  // `steps` whole fused steps in one persistent kernel, step s on the rows at positions
  // [first + s * global_batch, + count) of the order; the cursor is neither read nor moved. phase_cycles:
  // the kernel's phase timer, or nullptr.
  void persistent_steps(int count, int global_batch, const SgdConfig& cfg, int first, int steps,
                        long long* phase_cycles = nullptr);

 private:
  void fc1_forward(int rows) const;
  // fc2's and fc1's backward products from dlogits: every gradient but the loss.
  void backward(int count);
  void mark(Mark m) const {
    if (timeline_) timeline_->mark(m, stream());
  }

  StepView b_;
  StepKernels k_;
  DeviceTimeline* timeline_;  // null: no marks
  FusedStepCounts counts_;
};

}  // namespace mnistdp
