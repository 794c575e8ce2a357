#pragma once
// ReLU, nn.ReLU(): max(z, 0), with a NaN passing through as in torch.relu. Its derivative is read from the
// output h = relu(z): h > 0 exactly where z > 0, so the backward pass needs no copy of z (PyTorch's
// threshold_backward makes the same test on the output).
#include "kernels/ref/host_device_function.hpp"

namespace mnistdp::activations {
inline namespace MNISTDP_MATH_SIDE {

struct Relu {
  static constexpr const char* kName = "relu";
  static constexpr const char* kTorch = "nn.ReLU()";
  // The backward pass reads the output h, not the input z.
  static constexpr bool kReadsInput = false;

  // < rather than max(): a NaN passes through, as in torch.relu.
  MNISTDP_HOST_DEVICE static float forward(float z) { return z < 0.0f ? 0.0f : z; }
  // dy times relu'(z), from h: 0 where h <= 0 (a NaN in h keeps dy, as threshold_backward does).
  MNISTDP_HOST_DEVICE static float backward(float dy, float h) { return h <= 0.0f ? 0.0f : dy; }
};

}  // namespace MNISTDP_MATH_SIDE
}  // namespace mnistdp::activations
