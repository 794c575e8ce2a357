#pragma once
// MNISTDP_HOST_DEVICE: __host__ __device__ under nvcc, nothing elsewhere, for the small index functions that
// kernels and CPU tests share (classifier_head_split.hpp, weight_gradient_items.hpp).
#if defined(__CUDACC__)
#define MNISTDP_HOST_DEVICE __host__ __device__
#else
#define MNISTDP_HOST_DEVICE
#endif
