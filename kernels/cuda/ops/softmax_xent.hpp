#pragma once
// Softmax cross-entropy on the device, forward and backward in one kernel (contract:
// kernels/ref/softmax_xent.hpp).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace mnistdp::cuda {

// logits: [batch, classes]  labels: [batch], each < classes
//   -> dlogits: [batch, classes] = (softmax(logits) - onehot(labels)) * grad_scale; nullptr skips it
//   -> loss_sum: [1], device memory: the sum over the rows of -log softmax(logits)[label] (overwritten)
// One block does the whole batch, so the loss sum is reduced in a fixed order: reproducible to the bit. It is
// meant for the batches of this model (tens to a few thousand rows of ten classes).
void softmax_xent(const float* logits, const std::uint8_t* labels, float* dlogits, float* loss_sum, int batch,
                  int classes, float grad_scale, cudaStream_t stream);

}  // namespace mnistdp::cuda
