#pragma once
// Stochastic gradient descent with torch.optim.SGD's semantics, over one flat parameter buffer.
#include <cstddef>

namespace mnistdp {

struct SgdConfig {
  float lr = 0.01f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
};

namespace ref {

// params, grads, momentum: [n]. As torch.optim.SGD does:
//   g = grad + weight_decay * p
//   if momentum != 0: buf = first_step ? g : momentum * buf + (1 - dampening) * g
//                     g = nesterov ? g + momentum * buf : buf
//   p = p - lr * g
// momentum may be nullptr when cfg.momentum == 0 (no buffer is kept then, as in PyTorch).
void sgd_step(float* params, const float* grads, float* momentum, std::size_t n, const SgdConfig& cfg,
              bool first_step);

}  // namespace ref

}  // namespace mnistdp
