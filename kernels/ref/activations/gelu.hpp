#pragma once
// GELU, nn.GELU() in its exact form: z Phi(z) = 0.5 z (1 + erf(z / sqrt(2))). Its derivative,
// Phi(z) + z phi(z), cannot be read back from the output (GELU is not monotonic below -0.75), so the backward
// pass reads the input z, which the forward pass keeps beside h.
//
// Written as PyTorch's CPU kernels write them (aten/src/ATen/native/cpu/Activation.cpp, GeluKernelImpl and
// GeluBackwardKernelImpl), operation for operation, so that the CPU path's results stay within a few ulps of
// nn.GELU()'s. erff and expf are the C library's on the CPU and the device's on a GPU (within 2 ulps each);
// the emulated device answers within the same bounds (emu/device_math.hpp).
#include <cmath>

#include "kernels/ref/host_device_function.hpp"

namespace mnistdp::activations {
inline namespace MNISTDP_MATH_SIDE {

struct Gelu {
  static constexpr const char* kName = "gelu";
  static constexpr const char* kTorch = "nn.GELU()";
  // The backward pass reads the pre-activation z.
  static constexpr bool kReadsInput = true;

  static constexpr float kSqrtHalf = 0.70710678118654752440f;      // M_SQRT1_2
  static constexpr float kInvSqrtTwoPi = 0.39894228040143267794f;  // M_2_SQRTPI * M_SQRT1_2 * 0.5

  MNISTDP_HOST_DEVICE static float forward(float z) { return z * 0.5f * (1.0f + erff(z * kSqrtHalf)); }
  // dy (Phi(z) + z phi(z)).
  MNISTDP_HOST_DEVICE static float backward(float dy, float z) {
    const float cdf = 0.5f * (1.0f + erff(z * kSqrtHalf));
    const float pdf = kInvSqrtTwoPi * expf(z * z * -0.5f);
    return dy * (cdf + z * pdf);
  }
};

}  // namespace MNISTDP_MATH_SIDE
}  // namespace mnistdp::activations
