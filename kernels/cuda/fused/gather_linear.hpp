#pragma once
// The first kernel of the fused step (CudaStepOptions::fused_step): the batch gathered from the uint8 data
// set inside the first layer's forward product, in one launch where the plain path makes two.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/ref/activation.hpp"

namespace mnistdp::cuda {

// images: [n_images, in] uint8   labels: [n_images]   order: [n_order], the epoch's order of rows
// first: [1] device memory, the batch's first position in order (read when the kernel runs: the step graph's
//   row offset, host/cuda/cuda_replica.hpp), with *first + batch <= n_order
// w: [out, in]   b: [out]
//   -> x: [batch, in], y: [batch]: the batch, equal to gather_normalize_at's to the bit
//   -> h: [batch, out] = act(x w^T + b), act the hidden layer's activation (kernels/ref/activation.hpp),
//      equal to linear_forward's with the hand-written GEMMs to the bit
//   -> z: [batch, out] = x w^T + b, where act's backward pass reads it (keeps_pre_activation); else unused
// (GEMM v4's tiling, kernels/cuda/gemm/slab.cuh, with the pixels normalised as they are staged). The one
// exception to "to the bit" is kernels/cuda/fused/classifier_head.hpp's: a sum of -0, which only underflow
// reaches, comes out +0 from tiled and blocked, -0 from here. out must be at least 1.
struct GatherLinearArgs {
  const std::uint8_t* images = nullptr;
  const std::uint8_t* labels = nullptr;
  const std::int32_t* order = nullptr;
  const int* first = nullptr;
  const float* w = nullptr;
  const float* b = nullptr;
  float* x = nullptr;
  std::uint8_t* y = nullptr;
  float* h = nullptr;
  float* z = nullptr;
  Activation activation = kDefaultActivation;
  int batch = 0;
  int in = 0;
  int out = 0;
};

// Throws std::invalid_argument for a negative size, out 0, or a null pointer among those that batch, in and
// the activation need (first aside: the persistent step gives the offset another way).
void validate(const GatherLinearArgs& args);

void gather_linear_forward(const GatherLinearArgs& args, cudaStream_t stream);

}  // namespace mnistdp::cuda
