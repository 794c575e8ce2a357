#pragma once
// The classifier head of a training step in one launch: fc2's forward product, the softmax cross-entropy, and
// fc2's backward products, with fc1's bias gradient as well. In the plain path these are six launches (fc2
// forward, softmax_xent, fc2's weight gradient, its bias gradient, the input gradient with the activation's
// derivative, and fc1's bias gradient); the step is bound by launches, not by arithmetic
// (docs/performance.md).
//
// Every output equals the plain path's with --gemm naive, tiled, blocked or slab to the bit: each element is
// summed by one thread in the order those GEMMs use (k ascending, fused multiply-adds from 0, then the
// epilogue), the bias gradients in row order as column_sums does, and the loss as softmax_xent does. One
// caveat, which data never meets: tiled and blocked run their padding through fma(0, 0, acc), which turns a
// sum of -0 (possible only through underflow) into +0, where the head, like naive and slab, keeps the -0.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/runtime/launch_order.hpp"
#include "kernels/ref/activation.hpp"

namespace mnistdp::cuda {

// Whether one launch can take a shard of `batch` rows: every block keeps the shard's logits and their
// gradient in shared memory, 2 * batch * classes floats, which must fit in 47 KiB (with 10 classes: 601
// rows).
bool classifier_head_fits(int batch, int classes);
// The most rows that fit (classifier_head_fits), for `classes` >= 1 classes.
int classifier_head_max_rows(int classes);

// h: [batch, hidden], fc1's output after its activation   w: [classes, hidden]   b: [classes]
// z: [batch, hidden], fc1's output before it, where the activation's backward pass reads it
//   (keeps_pre_activation); else unused
// labels: [batch], each < classes
//   -> logits: [batch, classes] = h w^T + b
//   -> dlogits: [batch, classes] = (softmax(logits) - onehot(labels)) * grad_scale
//   -> loss_sum: [1] = the sum over rows of -log softmax(logits)[label]
//   -> dw: [classes, hidden] = dlogits^T h      db: [classes] = column sums of dlogits
//   -> dh: [batch, hidden] = dlogits w times the activation's derivative (activation::backward, from h or z:
//      ReLU's 0 where h <= 0)
//   -> dh_sums: [hidden] = column sums of dh (fc1's bias gradient)
// Every output is overwritten; batch 0 gives zeros and reads and writes no rows (the per-row pointers may
// then be null). Throws std::invalid_argument for a bad shape, a null pointer, or a shape that does not fit
// (classifier_head_fits).
struct ClassifierHeadArgs {
  const float* h = nullptr;
  const float* z = nullptr;
  Activation activation = kDefaultActivation;
  const float* w = nullptr;
  const float* b = nullptr;
  const std::uint8_t* labels = nullptr;
  float* logits = nullptr;
  float* dlogits = nullptr;
  float* loss_sum = nullptr;
  float* dw = nullptr;
  float* db = nullptr;
  float* dh = nullptr;
  float* dh_sums = nullptr;
  int batch = 0;
  int hidden = 0;
  int classes = 0;
  float grad_scale = 1.0f;
};

// Throws std::invalid_argument for what classifier_head refuses.
void validate(const ClassifierHeadArgs& args);

// order: how the launch follows the kernel before it on the stream (launch_order.hpp); the same results
// either way.
void classifier_head(const ClassifierHeadArgs& args, cudaStream_t stream,
                     LaunchOrder order = LaunchOrder::serial);

}  // namespace mnistdp::cuda
