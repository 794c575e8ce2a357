// The activations of kernels/ref/activation.hpp: each function against its definition in double, the table
// the command line and the checkpoints read, and ref::linear's forward and backward passes with each
// activation against the same math in double. The CPU path's kernels are checked against ref:: in
// tests/test_cpu_gemm.cpp, the CUDA kernels in tests/gpu/test_linear_cuda.cpp, and the CPU path's GELU
// against PyTorch's nn.GELU() in tests/python/test_step_vs_torch.py.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/ref/activation.hpp"
#include "kernels/ref/linear.hpp"

namespace {

using mnistdp::Activation;
using mnistdp::ActivationFn;
using mnistdp::kActivations;

constexpr double kEps = 0x1p-24;  // a float's unit roundoff

// The definitions, in double: f(z), f'(z), and the magnitude of the terms each is computed from (the float
// computation's error is a few roundings of those, not of the result, which cancels for GELU at large
// negative z).
struct Exact {
  double value, derivative, terms, derivative_terms;
};

Exact exact(Activation a, double z) {
  switch (a) {
    case Activation::relu:
      return {z < 0.0 ? 0.0 : z, z > 0.0 ? 1.0 : 0.0, 0.0, 0.0};
    case Activation::gelu: {
      const double erf = std::erf(z / std::sqrt(2.0));
      const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI);
      return {0.5 * z * (1.0 + erf), 0.5 * (1.0 + erf) + z * pdf, 0.5 * std::fabs(z) * (1.0 + std::fabs(erf)),
              0.5 * (1.0 + std::fabs(erf)) + std::fabs(z) * pdf};
    }
    case Activation::identity:
      break;
  }
  return {z, 1.0, 0.0, 0.0};
}

float forward(Activation a, float z) {
  return mnistdp::with_activation(a, [&](auto id) { return ActivationFn<decltype(id)::value>::forward(z); });
}

// f'(z) dy, read from what the activation's row says: h = f(z) or z.
float backward(Activation a, float dy, float z) {
  return mnistdp::with_activation(a, [&](auto id) {
    using A = ActivationFn<decltype(id)::value>;
    return A::backward(dy, A::kReadsInput ? z : A::forward(z));
  });
}

}  // namespace

TEST_CASE("the activations' table: unique names, the default first, names read back", "[activation]") {
  std::set<std::string> names;
  for (const auto& row : kActivations) {
    CHECK(names.insert(row.name).second);
    CHECK(mnistdp::parse_activation(row.name) == row.id);
    CHECK(std::string(mnistdp::activation_name(row.id)) == row.name);
    CHECK(&mnistdp::activation_row(row.id) == &row);
    CHECK(mnistdp::keeps_pre_activation(row.id) == row.reads_input);
  }
  CHECK(mnistdp::kDefaultActivation == Activation::relu);
  CHECK(mnistdp::activation_choices() == "relu, gelu");
  CHECK_FALSE(mnistdp::parse_activation("tanh").has_value());
  CHECK_FALSE(mnistdp::parse_activation("identity").has_value());  // fc2's, not the hidden layer's choice
  CHECK_THROWS_AS(mnistdp::activation_row(Activation::identity), std::invalid_argument);
  // ReLU's derivative is read from h, GELU's from z (GELU is not monotonic: h does not give z back).
  CHECK_FALSE(mnistdp::keeps_pre_activation(Activation::relu));
  CHECK(mnistdp::keeps_pre_activation(Activation::gelu));
}

TEST_CASE("each activation and its derivative against the definition in double", "[activation]") {
  std::mt19937 rng(20261207);
  std::uniform_real_distribution<float> dist(-6.0f, 6.0f);
  std::vector<float> zs{0.0f, -0.0f, 1.0f, -1.0f, -0.75f, 1e-30f, -1e-30f, 10.0f, -10.0f};
  for (int i = 0; i < 10000; ++i)
    zs.push_back(dist(rng));
  for (const auto& row : kActivations) {
    INFO(row.name);
    for (const float z : zs) {
      INFO("z = " << z);
      const Exact e = exact(row.id, z);
      // A few roundings of the terms (and the C library's erff and expf within an ulp or two of theirs).
      CHECK(std::fabs(forward(row.id, z) - e.value) <= 8 * kEps * e.terms + 1e-45);
      const float dy = 0.75f;
      CHECK(std::fabs(backward(row.id, dy, z) - dy * e.derivative) <=
            16 * kEps * dy * e.derivative_terms + 1e-45);
    }
  }
  // NaN passes through both, as in PyTorch.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const auto& row : kActivations) {
    INFO(row.name);
    CHECK(std::isnan(forward(row.id, nan)));
  }
  // ReLU's derivative at a NaN output keeps the gradient, as threshold_backward does.
  CHECK(ActivationFn<Activation::relu>::backward(2.0f, nan) == 2.0f);
}

TEST_CASE("ref::linear with each activation against the same math in double", "[activation][linear]") {
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const auto random_vec = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& e : v)
      e = dist(rng);
    return v;
  };
  for (const mnistdp::LinearShape s : {mnistdp::LinearShape{5, 33, 17}, mnistdp::LinearShape{1, 7, 3}}) {
    const auto x = random_vec(static_cast<std::size_t>(s.batch * s.in));
    const auto w = random_vec(static_cast<std::size_t>(s.out * s.in));
    const auto b = random_vec(static_cast<std::size_t>(s.out));
    const auto dy = random_vec(static_cast<std::size_t>(s.batch * s.out));
    for (const auto& row : kActivations) {
      INFO(row.name << ", batch " << s.batch << ", in " << s.in << ", out " << s.out);
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> y(static_cast<std::size_t>(s.batch * s.out), nan), z(y.size(), nan);
      mnistdp::ref::linear_forward(x.data(), w.data(), b.data(), y.data(), s, row.id,
                                   row.reads_input ? z.data() : nullptr);
      for (int i = 0; i < s.batch; ++i)
        for (int o = 0; o < s.out; ++o) {
          double sum = b[static_cast<std::size_t>(o)], magnitude = std::fabs(sum);
          for (int k = 0; k < s.in; ++k) {
            const double t = static_cast<double>(x[static_cast<std::size_t>(i * s.in + k)]) *
                             w[static_cast<std::size_t>(o * s.in + k)];
            sum += t;
            magnitude += std::fabs(t);
          }
          const std::size_t at = static_cast<std::size_t>(i * s.out + o);
          const double product_error = (s.in + 1) * kEps * magnitude;
          if (row.reads_input) CHECK(std::fabs(z[at] - sum) <= product_error);
          // Every activation here is at most 1.13-Lipschitz: the product's error grows by that at most.
          const Exact e = exact(row.id, sum);
          CHECK(std::fabs(y[at] - e.value) <= 1.13 * product_error + 8 * kEps * e.terms);
        }
      // The backward pass: dx = (dy w) f'(z), with z the layer input's pre-activation (here x itself).
      std::vector<float> dw(static_cast<std::size_t>(s.out * s.in)), db(static_cast<std::size_t>(s.out));
      std::vector<float> h(x.size()), dx(x.size(), nan);
      for (std::size_t j = 0; j < x.size(); ++j)
        h[j] = forward(row.id, x[j]);
      mnistdp::ref::linear_backward(dy.data(), h.data(), w.data(), dw.data(), db.data(), dx.data(), s, row.id,
                                    x.data());
      for (int i = 0; i < s.batch; ++i)
        for (int k = 0; k < s.in; ++k) {
          double sum = 0.0, magnitude = 0.0;
          for (int o = 0; o < s.out; ++o) {
            const double t = static_cast<double>(dy[static_cast<std::size_t>(i * s.out + o)]) *
                             w[static_cast<std::size_t>(o * s.in + k)];
            sum += t;
            magnitude += std::fabs(t);
          }
          const std::size_t at = static_cast<std::size_t>(i * s.in + k);
          const Exact e = exact(row.id, x[at]);
          CHECK(std::fabs(dx[at] - sum * e.derivative) <=
                s.out * kEps * magnitude * std::fabs(e.derivative) +
                    16 * kEps * std::fabs(sum) * e.derivative_terms + 1e-30);
        }
    }
  }
}
