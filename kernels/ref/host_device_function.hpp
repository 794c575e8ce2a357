#pragma once
// MNISTDP_HOST_DEVICE: __host__ __device__ under nvcc, nothing elsewhere, for the small functions that
// kernels and CPU code share (classifier_head_split.hpp, weight_gradient_items.hpp, activations/).
#if defined(__CUDACC__)
#define MNISTDP_HOST_DEVICE __host__ __device__
#else
#define MNISTDP_HOST_DEVICE
#endif

// MNISTDP_MATH_SIDE: the name of an inline namespace that differs between device code and host code, around
// shared inline functions that call the math library (activations/gelu.hpp). The device's erff and expf are
// not the C library's (emu/device_math.hpp); the emulated build compiles both sides with one compiler into
// one program, and with one name for both the linker would keep one copy of such a function for both.
#if defined(__CUDA_ARCH__)
#define MNISTDP_MATH_SIDE device_side
#else
#define MNISTDP_MATH_SIDE host_side
#endif
