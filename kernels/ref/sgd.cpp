#include <stdexcept>

#include "kernels/ref/sgd.hpp"

namespace mnistdp::ref {

// Each line below is one float rounding of torch.optim.SGD's update, in its order. Nothing is fused into a
// multiply-add (kernels/CMakeLists.txt builds this library with -ffp-contract=off), so the result is fixed by
// these formulas alone; a CUDA version agrees to the bit only if it also avoids contraction (__fmul_rn and
// __fadd_rn, or -fmad=false).
void sgd_step(float* params,       // [n]
              const float* grads,  // [n]
              float* momentum,     // [n], or nullptr when cfg.momentum == 0
              std::size_t n, const SgdConfig& cfg, bool first_step) {
  // Copies, not cfg.x in the loop: params is a float* the compiler must assume may alias cfg's floats, which
  // would force a reload per element and stop the loop from being vectorised (measured 3 to 5 times slower at
  // 203,530 params).
  const float lr = cfg.lr;
  const float mu = cfg.momentum;
  const float weight_decay = cfg.weight_decay;
  const float keep = 1.0f - cfg.dampening;
  const bool nesterov = cfg.nesterov;
  const bool use_momentum = mu != 0.0f;
  if (use_momentum && momentum == nullptr)
    throw std::invalid_argument("sgd_step: momentum != 0 needs a momentum buffer");
  for (std::size_t j = 0; j < n; ++j) {
    float g = grads[j];
    if (weight_decay != 0.0f) g = g + weight_decay * params[j];
    if (use_momentum) {
      // PyTorch's first step copies g into the fresh buffer, undampened.
      const float buf = first_step ? g : mu * momentum[j] + keep * g;
      momentum[j] = buf;
      g = nesterov ? g + mu * buf : buf;
    }
    params[j] = params[j] - lr * g;
  }
}

}  // namespace mnistdp::ref
