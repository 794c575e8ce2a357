// gather_normalize: exact pixel values of ToTensor() + Normalize((0.5,), (0.5,)), and rows in index order.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/gather.hpp"

using mnistdp::ref::normalize_pixel;

// Exact in float: 0 / 255 = 0 and 255 / 255 = 1, and the subtraction and the division by 0.5 are exact.
static_assert(normalize_pixel(0) == -1.0f);
static_assert(normalize_pixel(255) == 1.0f);

TEST_CASE("normalize_pixel gives the exact float values", "[kernels][gather]") {
  REQUIRE(normalize_pixel(0) == -1.0f);
  REQUIRE(normalize_pixel(255) == 1.0f);
  // 128 / 255 rounds to 0x1.010102p-1; minus 0.5 and over 0.5 are then exact: 0x1.0102p-8. Not the float
  // nearest 1/255 (0x1.010102p-8): the value depends on the order of operations, which is why every
  // implementation shares this one function.
  REQUIRE(normalize_pixel(128) == 0x1.0102p-8f);
  // Monotonic over all 256 values, and within one rounding of (p / 255 - 0.5) / 0.5 in double.
  for (int p = 0; p < 256; ++p) {
    const auto px = static_cast<std::uint8_t>(p);
    const double exact = (p / 255.0 - 0.5) / 0.5;
    REQUIRE(std::abs(normalize_pixel(px) - exact) <= 0x1p-23);
    if (p > 0) REQUIRE(normalize_pixel(px) > normalize_pixel(static_cast<std::uint8_t>(p - 1)));
  }
}

TEST_CASE("gather_normalize picks rows and labels in index order", "[kernels][gather]") {
  std::mt19937 rng(5);
  const int n_images = 5, pixels = 3;
  // Image r holds r * 50, r * 50 + 1, r * 50 + 2 (image 5 would need 250..252), so each value names its row.
  std::vector<std::uint8_t> images(static_cast<std::size_t>(n_images * pixels));
  for (std::size_t j = 0; j < images.size(); ++j)
    images[j] = static_cast<std::uint8_t>((j / pixels) * 50 + j % pixels);
  images[0] = 0;
  images[static_cast<std::size_t>(4 * pixels + 2)] = 255;
  std::uniform_int_distribution<int> label_dist(0, 9);
  std::vector<std::uint8_t> labels(static_cast<std::size_t>(n_images));
  for (auto& l : labels)
    l = static_cast<std::uint8_t>(label_dist(rng));

  // Out of order, repeated, first and last images.
  const std::vector<std::int32_t> indices = {3, 0, 4, 3, 1};
  const int batch = static_cast<int>(indices.size());
  std::vector<float> x(static_cast<std::size_t>(batch * pixels), std::numeric_limits<float>::quiet_NaN());
  std::vector<std::uint8_t> y(static_cast<std::size_t>(batch), 255);
  mnistdp::ref::gather_normalize(images.data(), labels.data(), indices.data(), x.data(), y.data(), batch,
                                 pixels);

  for (int i = 0; i < batch; ++i) {
    const auto src = static_cast<std::size_t>(indices[i]);
    REQUIRE(y[i] == labels[src]);
    for (int p = 0; p < pixels; ++p)
      REQUIRE(x[static_cast<std::size_t>(i * pixels + p)] == normalize_pixel(images[src * pixels + p]));
  }
  // Spelled out for a few: row 1 is image 0, whose first pixel is 0; row 2 is image 4, whose last is 255;
  // row 0 is image 3, first pixel 150.
  REQUIRE(x[3] == -1.0f);
  REQUIRE(x[8] == 1.0f);
  REQUIRE(x[0] == normalize_pixel(150));

  SECTION("batch 0 writes nothing") {
    mnistdp::ref::gather_normalize(images.data(), labels.data(), nullptr, nullptr, nullptr, 0, pixels);
  }
}
