#pragma once
// Builds a batch on the device from the device-resident uint8 data set (kernels/ref/gather.hpp has the
// contract). The data set is uploaded once and stays uint8 (47 MB for MNIST rather than 188 MB as float);
// each step expands only its own rows. Reading uint8 inside fc1's GEMM instead would save one launch and one
// 200 KB round trip through L2, but would tie the normalisation to every GEMM version; a separate gather
// keeps the GEMMs generic and the batch inspectable.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace mnistdp::cuda {

// images: [n_images, pixels] uint8  labels: [n_images]  indices: [batch], each < n_images (checked by the
// caller)
//   -> x: [batch, pixels] = ref::normalize_pixel(images[indices[r]]), equal to the bit  y: [batch]
void gather_normalize(const std::uint8_t* images, const std::uint8_t* labels, const std::int32_t* indices,
                      float* x, std::uint8_t* y, int batch, int pixels, cudaStream_t stream);

// The same, with the batch's rows at order[*first, *first + batch): first is read on the device when the
// kernel runs, not when it is launched, so that one captured CUDA graph serves every batch of an epoch
// (host/cuda/cuda_replica.cpp advances the offset inside the graph). order: [n_order]  first: [1] device
// memory, with *first + batch <= n_order (the caller's to guarantee: the kernel cannot check it).
void gather_normalize_at(const std::uint8_t* images, const std::uint8_t* labels, const std::int32_t* order,
                         const int* first, float* x, std::uint8_t* y, int batch, int pixels,
                         cudaStream_t stream);

}  // namespace mnistdp::cuda
