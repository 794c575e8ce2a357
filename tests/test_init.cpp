#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <vector>

#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "host/model/random.hpp"

using namespace mnistdp;

TEST_CASE("initial parameters lie within nn.Linear's bounds and fill them", "[init]") {
  std::vector<float> p(ParamLayout::kCount);
  init_parameters(p, 42);
  struct Tensor {
    std::size_t offset, count;
    int fan_in;
  };
  const Tensor tensors[] = {{ParamLayout::kFc1Weight, 256 * 784, 784},
                            {ParamLayout::kFc1Bias, 256, 784},
                            {ParamLayout::kFc2Weight, 10 * 256, 256},
                            {ParamLayout::kFc2Bias, 10, 256}};
  for (const Tensor& t : tensors) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(t.fan_in));
    float lo = bound, hi = -bound;
    double sum = 0;
    for (std::size_t i = t.offset; i < t.offset + t.count; ++i) {
      REQUIRE(p[i] >= -bound);
      REQUIRE(p[i] < bound);
      lo = std::min(lo, p[i]);
      hi = std::max(hi, p[i]);
      sum += p[i];
    }
    // Uniform draws: the extremes approach the bounds and the mean approaches 0 (loosely for the small
    // biases).
    const double spread = t.count > 1000 ? 0.01 : 0.5;
    CHECK(lo < -bound * (1 - spread));
    CHECK(hi > bound * (1 - spread));
    CHECK(std::abs(sum / static_cast<double>(t.count)) < bound * (t.count > 1000 ? 0.02 : 0.6));
  }
}

TEST_CASE("initial parameters are reproducible from the seed and differ between seeds", "[init]") {
  std::vector<float> a(ParamLayout::kCount), b(ParamLayout::kCount), c(ParamLayout::kCount);
  init_parameters(a, 7);
  init_parameters(b, 7);
  init_parameters(c, 8);
  CHECK(a == b);
  CHECK(a != c);
  // The generator is ours, not the standard library's, so these values hold on every platform.
  Rng rng(0);
  CHECK(rng.next_u64() == 0xE220A8397B1DCDAFull);
}

TEST_CASE("each epoch's order is a permutation, reproducible, and different per epoch", "[init]") {
  std::vector<std::int32_t> e0(1000), e0_again(1000), e1(1000);
  epoch_order(e0, 3, 0);
  epoch_order(e0_again, 3, 0);
  epoch_order(e1, 3, 1);
  CHECK(e0 == e0_again);
  CHECK(e0 != e1);
  std::set<std::int32_t> seen(e0.begin(), e0.end());
  CHECK(seen.size() == 1000);
  CHECK(*seen.begin() == 0);
  CHECK(*seen.rbegin() == 999);
}

TEST_CASE("Rng::below is unbiased enough and stays in range", "[init]") {
  Rng rng(1);
  std::vector<int> counts(7);
  for (int i = 0; i < 70000; ++i) {
    const auto v = rng.below(7);
    REQUIRE(v < 7);
    ++counts[v];
  }
  for (int c : counts)
    CHECK(std::abs(c - 10000) < 500);  // about 5 standard deviations
}
