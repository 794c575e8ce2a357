// SGD with torch.optim.SGD's semantics: hand-computed updates on exactly representable numbers, then the
// float formulas, operation by operation, on random inputs (the reference must match them to the bit).
#include <catch2/catch.hpp>

#include <cstddef>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/ref/sgd.hpp"

namespace {

using mnistdp::SgdConfig;

std::vector<float> random_vec(std::mt19937& rng, std::size_t n) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& e : v)
    e = dist(rng);
  return v;
}

// The update of one element, written out as torch.optim.SGD's _single_tensor_sgd does it, one float rounding
// per operation (the build keeps -ffp-contract off, so no multiply-add is fused here either).
struct Expected {
  float p;
  float buf;
};

Expected expected_step(float p, float grad, float buf, const SgdConfig& cfg, bool first_step) {
  float g = grad;
  if (cfg.weight_decay != 0.0f) g = g + cfg.weight_decay * p;  // d_p = d_p.add(p, alpha=weight_decay)
  if (cfg.momentum != 0.0f) {
    if (first_step) {
      buf = g;  // buf = torch.clone(d_p).detach()
    } else {
      buf =
          cfg.momentum * buf + (1.0f - cfg.dampening) * g;  // buf.mul_(momentum).add_(d_p, alpha=1-dampening)
    }
    g = cfg.nesterov ? g + cfg.momentum * buf : buf;  // d_p = d_p.add(buf, alpha=momentum) or buf
  }
  return {p - cfg.lr * g, buf};  // param.add_(d_p, alpha=-lr)
}

}  // namespace

TEST_CASE("sgd_step on hand-computed values", "[kernels][sgd]") {
  // Powers of two and small dyadic numbers: every intermediate is exact, so these are the true updates.
  SECTION("plain: p - lr g") {
    std::vector<float> p = {1.0f, -2.0f, 0.5f}, g = {0.5f, 1.0f, -4.0f};
    mnistdp::ref::sgd_step(p.data(), g.data(), nullptr, 3, SgdConfig{.lr = 0.25f}, true);
    REQUIRE(p == std::vector<float>{0.875f, -2.25f, 1.5f});
  }
  SECTION("weight decay: g + wd p") {
    std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, 1.0f};
    mnistdp::ref::sgd_step(p.data(), g.data(), nullptr, 2, SgdConfig{.lr = 0.5f, .weight_decay = 0.25f},
                           true);
    // g = 0.75 and 0.5; p = 1 - 0.375, -2 - 0.25
    REQUIRE(p == std::vector<float>{0.625f, -2.25f});
  }
  SECTION("momentum: the first step copies g into the buffer, the second is momentum buf + g") {
    std::vector<float> p = {1.0f}, g = {0.5f}, buf = {123.0f};  // stale contents must be ignored
    const SgdConfig cfg{.lr = 0.5f, .momentum = 0.5f};
    mnistdp::ref::sgd_step(p.data(), g.data(), buf.data(), 1, cfg, true);
    REQUIRE(buf[0] == 0.5f);
    REQUIRE(p[0] == 0.75f);
    g[0] = 1.0f;
    mnistdp::ref::sgd_step(p.data(), g.data(), buf.data(), 1, cfg, false);
    REQUIRE(buf[0] == 1.25f);  // 0.5 * 0.5 + 1
    REQUIRE(p[0] == 0.125f);   // 0.75 - 0.5 * 1.25
  }
  SECTION("dampening: not on the first step, (1 - dampening) g after") {
    std::vector<float> p = {1.0f}, g = {0.5f}, buf = {0.0f};
    const SgdConfig cfg{.lr = 1.0f, .momentum = 0.5f, .dampening = 0.75f};
    mnistdp::ref::sgd_step(p.data(), g.data(), buf.data(), 1, cfg, true);
    REQUIRE(buf[0] == 0.5f);  // undampened, as in PyTorch
    REQUIRE(p[0] == 0.5f);
    g[0] = 2.0f;
    mnistdp::ref::sgd_step(p.data(), g.data(), buf.data(), 1, cfg, false);
    REQUIRE(buf[0] == 0.75f);  // 0.5 * 0.5 + 0.25 * 2
    REQUIRE(p[0] == -0.25f);
  }
  SECTION("nesterov: g + momentum buf") {
    std::vector<float> p = {1.0f}, g = {0.5f}, buf = {0.0f};
    const SgdConfig cfg{.lr = 1.0f, .momentum = 0.5f, .nesterov = true};
    mnistdp::ref::sgd_step(p.data(), g.data(), buf.data(), 1, cfg, true);
    REQUIRE(buf[0] == 0.5f);
    REQUIRE(p[0] == 0.25f);  // 1 - (0.5 + 0.5 * 0.5)
    g[0] = 1.0f;
    mnistdp::ref::sgd_step(p.data(), g.data(), buf.data(), 1, cfg, false);
    REQUIRE(buf[0] == 1.25f);  // 0.5 * 0.5 + 1
    REQUIRE(p[0] == -1.375f);  // 0.25 - (1 + 0.5 * 1.25)
  }
  SECTION("everything at once") {
    std::vector<float> p = {2.0f}, g = {0.5f}, buf = {0.0f};
    const SgdConfig cfg{
        .lr = 0.5f, .momentum = 0.5f, .dampening = 0.5f, .weight_decay = 0.25f, .nesterov = true};
    mnistdp::ref::sgd_step(p.data(), g.data(), buf.data(), 1, cfg, true);
    // g = 0.5 + 0.5 = 1; buf = 1; g = 1 + 0.5 = 1.5; p = 2 - 0.75
    REQUIRE(buf[0] == 1.0f);
    REQUIRE(p[0] == 1.25f);
    mnistdp::ref::sgd_step(p.data(), g.data(), buf.data(), 1, cfg, false);
    // g = 0.5 + 0.3125 = 0.8125; buf = 0.5 + 0.40625 = 0.90625; g = 0.8125 + 0.453125 = 1.265625;
    // p = 1.25 - 0.6328125
    REQUIRE(buf[0] == 0.90625f);
    REQUIRE(p[0] == 0.6171875f);
  }
}

TEST_CASE("sgd_step equals the float formulas to the bit", "[kernels][sgd]") {
  std::mt19937 rng(7);
  const std::size_t n = 1001;
  const SgdConfig configs[] = {
      {.lr = 0.01f},
      {.lr = 0.01f, .weight_decay = 5e-4f},
      {.lr = 0.01f, .momentum = 0.9f},
      {.lr = 0.03f, .momentum = 0.9f, .dampening = 0.1f},
      {.lr = 0.01f, .momentum = 0.9f, .nesterov = true},
      {.lr = 0.1f, .momentum = 0.7f, .dampening = 0.3f, .weight_decay = 1e-3f, .nesterov = true},
  };
  for (const SgdConfig& cfg : configs) {
    INFO("lr " << cfg.lr << ", momentum " << cfg.momentum << ", dampening " << cfg.dampening
               << ", weight_decay " << cfg.weight_decay << ", nesterov " << cfg.nesterov);
    auto p = random_vec(rng, n);
    std::vector<float> buf(n, 0.0f);
    auto want_p = p;
    auto want_buf = buf;
    // Three steps: the first (buffer initialised from g) and two of the recurrence.
    for (int step = 0; step < 3; ++step) {
      const auto g = random_vec(rng, n);
      const bool first = step == 0;
      mnistdp::ref::sgd_step(p.data(), g.data(), cfg.momentum != 0.0f ? buf.data() : nullptr, n, cfg, first);
      for (std::size_t j = 0; j < n; ++j) {
        const Expected e = expected_step(want_p[j], g[j], want_buf[j], cfg, first);
        want_p[j] = e.p;
        want_buf[j] = e.buf;
      }
      REQUIRE(p == want_p);
      if (cfg.momentum != 0.0f) REQUIRE(buf == want_buf);
    }
  }
}

TEST_CASE("sgd_step buffer rules", "[kernels][sgd]") {
  std::vector<float> p = {1.0f}, g = {1.0f};
  SECTION("no buffer needed without momentum, and n = 0 is a no-op") {
    REQUIRE_NOTHROW(mnistdp::ref::sgd_step(p.data(), g.data(), nullptr, 1, SgdConfig{}, false));
    REQUIRE_NOTHROW(mnistdp::ref::sgd_step(nullptr, nullptr, nullptr, 0, SgdConfig{}, true));
  }
  SECTION("momentum without a buffer is refused") {
    REQUIRE_THROWS_AS(
        mnistdp::ref::sgd_step(p.data(), g.data(), nullptr, 1, SgdConfig{.momentum = 0.9f}, true),
        std::invalid_argument);
  }
}
