#pragma once
// SimpleNet's parameters in one flat buffer, in PyTorch's order and layouts, with named views into it.
// One buffer means that a copy, a checkpoint, the all-reduce and the SGD step are each one operation.
#include <cstddef>
#include <string>

namespace mnistdp {

struct ParamLayout {
  static constexpr int kInput = 784;
  static constexpr int kHidden = 256;
  static constexpr int kClasses = 10;

  static constexpr std::size_t kFc1Weight = 0;                                           // [256, 784]
  static constexpr std::size_t kFc1Bias = kFc1Weight + std::size_t{kHidden} * kInput;    // [256]
  static constexpr std::size_t kFc2Weight = kFc1Bias + kHidden;                          // [10, 256]
  static constexpr std::size_t kFc2Bias = kFc2Weight + std::size_t{kClasses} * kHidden;  // [10]
  static constexpr std::size_t kCount = kFc2Bias + kClasses;                             // 203,530

  // The gradient buffer has one more slot: the loss sum of the step rides in the same all-reduce.
  static constexpr std::size_t kLossSlot = kCount;
  static constexpr std::size_t kGradCount = kCount + 1;
};

// "fc1.weight[13, 200]": the PyTorch name and index of element `i` of the flat buffer, for messages.
std::string parameter_name(std::size_t i);

// Named views into a flat buffer (host or device memory alike: only pointer arithmetic happens here).
template <typename T>
struct ParamViews {
  T* fc1_weight;  // [256, 784]
  T* fc1_bias;    // [256]
  T* fc2_weight;  // [10, 256]
  T* fc2_bias;    // [10]

  static ParamViews of(T* flat) {
    return {flat + ParamLayout::kFc1Weight, flat + ParamLayout::kFc1Bias, flat + ParamLayout::kFc2Weight,
            flat + ParamLayout::kFc2Bias};
  }
};

}  // namespace mnistdp
