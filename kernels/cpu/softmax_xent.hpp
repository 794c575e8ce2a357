#pragma once
// Softmax cross-entropy for the CPU training path, whose logits are feature-major (kernels/cpu/linear.hpp):
// ref::softmax_xent_row on each row, read down the columns of logitsT, so that neither the logits nor their
// gradient need a transpose, and split among a team's members by rows of the batch.
#include <cstdint>

#include "kernels/cpu/linear.hpp"

namespace mnistdp::cpu {

// The most classes softmax_xent takes (its rows are copied to the stack).
constexpr int kMaxSoftmaxClasses = 64;

// For the part's share of the batch (the same columns as linear_forward_by_columns'): each row's
// ref::softmax_xent_row, its gradient stored both by rows and feature-major, and its loss in row_loss, which
// the caller sums in double in row order to get ref::softmax_xent's loss to the bit. Throws
// std::invalid_argument for more than kMaxSoftmaxClasses classes.
void softmax_xent(const float* logitsT,        // [classes, batch]
                  const std::uint8_t* labels,  // [batch], each < classes
                  float* dlogits,              // [batch, classes]
                  float* dlogitsT,             // [classes, batch]
                  float* row_loss,             // [batch]
                  int batch, int classes, float grad_scale, Part part = {});

}  // namespace mnistdp::cpu
