#pragma once
// The hidden layer's activation, as one concept shared by every backend: each activation is a struct in
// activations/ (its name, forward(z), backward(dy, saved) as functions a kernel and the CPU code both call,
// and which of z and h its backward pass reads), and a row of kActivations below. The command line, the
// checkpoint's metadata and the tests take their lists from that table; the kernels are compiled once per
// activation (with_activation), so the default ReLU path does exactly what it did with no activation to
// choose.
//
// What each path keeps for the backward pass: h = forward(z) always (fc2 reads it); z as well where the
// activation's kReadsInput says its derivative needs it (GELU), and then backward reads z; otherwise (ReLU)
// backward reads h, and no z is stored.
//
// Adding an activation: its struct in activations/, its enumerator and its row here; the tests in
// tests/test_activation.cpp (and their GPU twins) take it from the table. docs/kernels.md, "Adding an
// activation".
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "kernels/ref/activations/gelu.hpp"
#include "kernels/ref/activations/relu.hpp"

namespace mnistdp {

// identity: a layer without activation (fc2, the logits). The others are the hidden layer's choices.
enum class Activation : std::uint8_t { identity, relu, gelu };

namespace activations {
inline namespace MNISTDP_MATH_SIDE {
struct Identity {
  static constexpr const char* kName = "identity";
  static constexpr const char* kTorch = "nn.Identity()";
  static constexpr bool kReadsInput = false;
  MNISTDP_HOST_DEVICE static float forward(float z) { return z; }
  MNISTDP_HOST_DEVICE static float backward(float dy, float) { return dy; }
};
}  // namespace MNISTDP_MATH_SIDE
}  // namespace activations

// One row per activation the hidden layer may take, the default first.
struct ActivationRow {
  Activation id;
  const char* name;   // the command line's and the checkpoint's word
  const char* torch;  // what PyTorch calls it
  bool reads_input;   // the backward pass reads z (kept by the forward pass), not h
};

template <class A>
constexpr ActivationRow row_of(Activation id) {
  return {id, A::kName, A::kTorch, A::kReadsInput};
}

inline constexpr std::array kActivations = {
    row_of<activations::Relu>(Activation::relu),
    row_of<activations::Gelu>(Activation::gelu),
};
inline constexpr Activation kDefaultActivation = kActivations[0].id;

// The struct of each enumerator, for the compile-time dispatch below.
template <Activation A>
struct ActivationOf;
template <>
struct ActivationOf<Activation::identity> {
  using type = activations::Identity;
};
template <>
struct ActivationOf<Activation::relu> {
  using type = activations::Relu;
};
template <>
struct ActivationOf<Activation::gelu> {
  using type = activations::Gelu;
};
template <Activation A>
using ActivationFn = typename ActivationOf<A>::type;

// f(std::integral_constant<Activation, a>{}): code compiled once per activation, chosen at run time once
// (a launcher choosing its kernel, a loop choosing its body), never per element.
template <class F>
decltype(auto) with_activation(Activation a, F&& f) {
  switch (a) {
    case Activation::relu:
      return f(std::integral_constant<Activation, Activation::relu>{});
    case Activation::gelu:
      return f(std::integral_constant<Activation, Activation::gelu>{});
    case Activation::identity:
      break;
  }
  return f(std::integral_constant<Activation, Activation::identity>{});
}

// The row of a hidden layer's activation; identity (no row) throws std::invalid_argument.
const ActivationRow& activation_row(Activation a);
// "relu", "gelu", "identity".
const char* activation_name(Activation a);
// The activation a name gives, or nothing for a name that is none.
std::optional<Activation> parse_activation(std::string_view name);
// "relu, gelu": the choices, for messages.
std::string activation_choices();
// Whether the backward pass of `a` reads z, so that the forward pass must keep it.
inline bool keeps_pre_activation(Activation a) {
  return with_activation(a, [](auto id) { return ActivationFn<decltype(id)::value>::kReadsInput; });
}

}  // namespace mnistdp
