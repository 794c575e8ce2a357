#pragma once
// Builds a batch on the device from the device-resident uint8 data set (kernels/gather.hpp has the contract).
// The data set is uploaded once and stays uint8 (47 MB for MNIST rather than 188 MB as float); each step
// expands only its own rows. Reading uint8 inside fc1's GEMM instead would save one launch and one 200 KB
// round trip through L2, but would tie the normalisation to every GEMM version; a separate gather keeps the
// GEMMs generic and the batch inspectable.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace mnistdp::cuda {

// images: [n_images, pixels] uint8  labels: [n_images]  indices: [batch], each < n_images (checked by the
// caller)
//   -> x: [batch, pixels] = ref::normalize_pixel(images[indices[r]]), equal to the bit  y: [batch]
void gather_normalize(const std::uint8_t* images, const std::uint8_t* labels, const std::int32_t* indices,
                      float* x, std::uint8_t* y, int batch, int pixels, cudaStream_t stream);

}  // namespace mnistdp::cuda
