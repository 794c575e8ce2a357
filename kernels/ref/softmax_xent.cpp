#include <cmath>
#include <cstddef>

#include "kernels/ref/softmax_xent.hpp"

namespace mnistdp::ref {

float softmax_xent_row(const float* z, int label, float* dz, int classes, float grad_scale) {
  // Shift by the row max so that exp never overflows and the largest term is exactly 1.
  float m = z[0];
  for (int j = 1; j < classes; ++j)
    m = z[j] > m ? z[j] : m;
  // Each exponential once: kept in dz until the sum is known (the costliest part of the loss on the CPU).
  float sum = 0.0f;
  for (int j = 0; j < classes; ++j) {
    const float e = std::exp(z[j] - m);
    if (dz != nullptr) dz[j] = e;
    sum += e;
  }
  const float lse = std::log(sum);  // sum >= 1, so the log is finite
  if (dz != nullptr)
    for (int j = 0; j < classes; ++j) {
      const float p = dz[j] / sum;
      dz[j] = (p - (j == label ? 1.0f : 0.0f)) * grad_scale;
    }
  return lse - (z[label] - m);
}

float softmax_xent(const float* logits,         // [batch, classes]
                   const std::uint8_t* labels,  // [batch]
                   float* dlogits,              // [batch, classes] or nullptr
                   int batch, int classes, float grad_scale) {
  double loss_sum = 0.0;  // double: 64 rows of losses near 2.3 would otherwise round at every add
  for (int i = 0; i < batch; ++i) {
    const auto row = static_cast<std::size_t>(i) * static_cast<std::size_t>(classes);
    loss_sum += static_cast<double>(softmax_xent_row(
        logits + row, labels[i], dlogits != nullptr ? dlogits + row : nullptr, classes, grad_scale));
  }
  return static_cast<float>(loss_sum);
}

int count_correct(const float* logits,         // [batch, classes]
                  const std::uint8_t* labels,  // [batch]
                  int batch, int classes) {
  int correct = 0;
  for (int i = 0; i < batch; ++i) {
    const float* z = logits + static_cast<std::size_t>(i) * static_cast<std::size_t>(classes);
    int best = 0;
    // Strict > keeps the first of equal maxima, as torch.argmax does.
    for (int j = 1; j < classes; ++j)
      if (z[j] > z[best]) best = j;
    if (best == labels[i]) ++correct;
  }
  return correct;
}

}  // namespace mnistdp::ref
