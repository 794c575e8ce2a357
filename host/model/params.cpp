#include "host/model/params.hpp"

#include <fmt/format.h>

namespace mnistdp {

std::string parameter_name(std::size_t i) {
  using L = ParamLayout;
  if (i < L::kFc1Bias) return fmt::format("fc1.weight[{}, {}]", i / L::kInput, i % L::kInput);
  if (i < L::kFc2Weight) return fmt::format("fc1.bias[{}]", i - L::kFc1Bias);
  if (i < L::kFc2Bias) {
    const std::size_t j = i - L::kFc2Weight;
    return fmt::format("fc2.weight[{}, {}]", j / L::kHidden, j % L::kHidden);
  }
  if (i < L::kCount) return fmt::format("fc2.bias[{}]", i - L::kFc2Bias);
  if (i == L::kLossSlot) return "loss sum";
  return fmt::format("index {} (past the parameters)", i);
}

}  // namespace mnistdp
