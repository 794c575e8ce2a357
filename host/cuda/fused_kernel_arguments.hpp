#pragma once
// SimpleNet's fused CUDA kernels on its flat buffers (host/model/params.hpp): the one place where the buffers
// of a step become the kernels' arguments, so that CudaReplica and mnist-dp-bench launch them alike.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/ops/loss_watch.hpp"
#include "kernels/cuda/runtime/launch_order.hpp"
#include "kernels/ref/activation.hpp"
#include "kernels/ref/sgd.hpp"

namespace mnistdp {

// A step's device buffers, as CudaReplica holds them, and the activation h came out of.
struct StepView {
  const std::uint8_t* images = nullptr;  // [n_images, 784], the training set
  const std::uint8_t* labels = nullptr;  // [n_images]
  const std::int32_t* order = nullptr;   // the epoch's order of rows
  int* cursor = nullptr;                 // [1]: the batch's first position in order
  float* params = nullptr;               // [ParamLayout::kCount]
  float* grads = nullptr;                // [ParamLayout::kGradCount], the loss sum in the last slot
  float* momentum = nullptr;             // [ParamLayout::kCount], or nullptr without momentum
  float* x = nullptr;                    // [rows, 784]
  std::uint8_t* y = nullptr;             // [rows]
  float* h = nullptr;                    // [rows, 256], after the activation
  float* z = nullptr;                    // [rows, 256], before it; where the activation's derivative reads z
  float* dh = nullptr;                   // [rows, 256]
  float* logits = nullptr;               // [rows, 10]
  float* dlogits = nullptr;              // [rows, 10]
  cuda::LossWatch* watch = nullptr;      // [1]: the loss record every step moves on, or nullptr for none
  Activation activation = kDefaultActivation;  // the hidden layer's, h = activation(z): every launch of the
                                               // step takes it from here
};

// The classifier head (kernels/cuda/fused/classifier_head.hpp) over h and y: the logits, their gradient, the
// loss slot, fc2's gradients, dh and fc1's bias gradient.
void enqueue_classifier_head(const StepView& b, int rows, float grad_scale, cudaStream_t stream,
                             cuda::LaunchOrder order = cuda::LaunchOrder::serial);

// The fused step's three kernels (CudaStepOptions::fused_step), rows from *cursor; advance_cursor: the last
// kernel moves *cursor on by global_batch (a benchmark that repeats one batch leaves it). order: how the
// second and third kernels follow the one before (the first is always launched the serial way).
void enqueue_fused_step(const StepView& b, int rows, int global_batch, const SgdConfig& cfg,
                        bool advance_cursor, cuda::LaunchOrder order, cudaStream_t stream);

// `steps` consecutive fused steps in one persistent kernel (kernels/cuda/fused/persistent_step.hpp), step s
// on the rows at positions [first + s * global_batch, + rows) of the order; b.cursor is neither read nor
// moved. blocks: the kernel's grid (cuda::persistent_steps). phase_cycles: its phase timer
// (cuda::PersistentStepArgs), or nullptr.
void enqueue_persistent_steps(const StepView& b, int rows, int global_batch, const SgdConfig& cfg, int first,
                              int steps, int blocks, cudaStream_t stream, long long* phase_cycles = nullptr);

}  // namespace mnistdp
