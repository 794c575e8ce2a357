#include "kernels/ref/activation.hpp"

#include <stdexcept>
#include <string>

namespace mnistdp {

const ActivationRow& activation_row(Activation a) {
  for (const ActivationRow& row : kActivations)
    if (row.id == a) return row;
  throw std::invalid_argument(std::string("activation_row: ") + activation_name(a) +
                              " is not a hidden layer's activation");
}

const char* activation_name(Activation a) {
  return with_activation(a, [](auto id) { return ActivationFn<decltype(id)::value>::kName; });
}

std::optional<Activation> parse_activation(std::string_view name) {
  for (const ActivationRow& row : kActivations)
    if (name == row.name) return row.id;
  return std::nullopt;
}

std::string activation_choices() {
  std::string out;
  for (const ActivationRow& row : kActivations)
    out += (out.empty() ? "" : ", ") + std::string(row.name);
  return out;
}

}  // namespace mnistdp
