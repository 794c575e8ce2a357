#pragma once
// Accuracy on the device: argmax per row and the count of rows whose argmax is the label.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace mnistdp::cuda {

// logits: [batch, classes]  labels: [batch] -> correct: [1], device memory: how many rows have
// argmax == label, the first maximum winning as in torch.argmax (overwritten). Same contract as
// ref::count_correct; one block, meant for chunks of up to a few thousand rows.
void count_correct(const float* logits, const std::uint8_t* labels, int* correct, int batch, int classes,
                   cudaStream_t stream);

}  // namespace mnistdp::cuda
