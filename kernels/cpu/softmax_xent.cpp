#include "kernels/cpu/softmax_xent.hpp"

#include <cstddef>
#include <stdexcept>
#include <string>

#include "kernels/ref/softmax_xent.hpp"

namespace mnistdp::cpu {

void softmax_xent(const float* logitsT, const std::uint8_t* labels, float* dlogits, float* dlogitsT,
                  float* row_loss, int batch, int classes, float grad_scale, Part part) {
  if (classes < 1 || classes > kMaxSoftmaxClasses)
    throw std::invalid_argument("cpu::softmax_xent: " + std::to_string(classes) + " classes, not 1 to " +
                                std::to_string(kMaxSoftmaxClasses));
  const Range rows = share(batch, part, kBatchAlign);
  for (int i = rows.begin; i < rows.end; ++i) {
    float z[kMaxSoftmaxClasses];
    for (int j = 0; j < classes; ++j)
      z[j] = logitsT[static_cast<std::size_t>(j) * batch + i];
    float* dz = dlogits + static_cast<std::size_t>(i) * classes;
    row_loss[i] = ref::softmax_xent_row(z, labels[i], dz, classes, grad_scale);
    for (int j = 0; j < classes; ++j)
      dlogitsT[static_cast<std::size_t>(j) * batch + i] = dz[j];
  }
}

}  // namespace mnistdp::cpu
