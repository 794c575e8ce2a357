#pragma once
// Evaluation's counts and sums on the device, through Thrust (kernels/cuda/thrust/thrust_ops.cuh).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace mnistdp {
class ThrustScratch;
}

namespace mnistdp::cuda {

// logits: [rows, classes]  labels: [rows] -> correct: [rows], device memory: 1 where the row's argmax is its
// label, else 0, the first maximum winning as in torch.argmax (ref::count_correct's rule). Queued on
// `stream`; the host does not wait.
void mark_correct(const float* logits, const std::uint8_t* labels, std::uint8_t* correct, int rows,
                  int classes, ThrustScratch& scratch, cudaStream_t stream);

// marks: [count] device memory, each 0 or 1 -> how many are 1. Waits for `stream`.
long long count_marked(const std::uint8_t* marks, int count, ThrustScratch& scratch, cudaStream_t stream);

// values: [count] device memory -> their sum, each widened to double before it is added (in an order of
// Thrust's choosing). Waits for `stream`.
double sum_in_double(const float* values, int count, ThrustScratch& scratch, cudaStream_t stream);

}  // namespace mnistdp::cuda
