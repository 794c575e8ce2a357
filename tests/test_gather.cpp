// gather_normalize: exact pixel values of ToTensor() + Normalize((0.5,), (0.5,)), and rows in index order.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/gather.hpp"
#include "kernels/ref/gather.hpp"
#include "tests/cpu_isa.hpp"

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

namespace {

// Every pixel value in every position of a vector, rows whose width leaves a remainder against 16 and 8,
// indices out of order and repeated: each version's x, and its xT where asked for, to the bit of ref::'s,
// every element written over NaN.
void check_cpu_gather(mnistdp::cpu::Isa isa) {
  std::mt19937 rng(5);
  for (const int pixels : {1, 7, 8, 16, 33, 784}) {
    const int images = 300;
    std::vector<std::uint8_t> data(static_cast<std::size_t>(images) * pixels), labels(images);
    for (std::size_t i = 0; i < data.size(); ++i)
      data[i] = static_cast<std::uint8_t>(i * 7 + i / 256);
    for (int i = 0; i < images; ++i)
      labels[i] = static_cast<std::uint8_t>(rng() % 10);
    std::vector<std::int32_t> indices(67);
    for (auto& index : indices)
      index = static_cast<std::int32_t>(rng() % images);
    const int batch = static_cast<int>(indices.size());
    const std::size_t n = static_cast<std::size_t>(batch) * pixels;
    std::vector<float> want(n), want_T(n);
    std::vector<std::uint8_t> want_y(batch);
    mnistdp::ref::gather_normalize(data.data(), labels.data(), indices.data(), want.data(), want_y.data(),
                                   batch, pixels);
    for (int i = 0; i < batch; ++i)
      for (int p = 0; p < pixels; ++p)
        want_T[static_cast<std::size_t>(p) * batch + i] = want[static_cast<std::size_t>(i) * pixels + p];
    // Without xT, and with it (the batch of 67 rows leaves 3 past the last block of 16, 3 past that of 8).
    for (const bool transposed : {false, true}) {
      std::vector<float> got(n, std::numeric_limits<float>::quiet_NaN()), got_T(n, got[0]);
      std::vector<std::uint8_t> got_y(batch, 255);
      mnistdp::cpu::gather_normalize(isa, data.data(), labels.data(), indices.data(), got.data(),
                                     transposed ? got_T.data() : nullptr, got_y.data(), batch, pixels);
      INFO(pixels << " pixels, " << (transposed ? "with" : "without") << " xT");
      REQUIRE(std::memcmp(got.data(), want.data(), n * sizeof(float)) == 0);
      REQUIRE(got_y == want_y);
      if (transposed) REQUIRE(std::memcmp(got_T.data(), want_T.data(), n * sizeof(float)) == 0);
    }
  }
}

}  // namespace

#define MNISTDP_CPU_GATHER_TEST(ISA, NAME)                                                          \
  TEST_CASE("cpu::gather_normalize (" NAME ") gives ref::'s bits", "[kernels][gather][cpu_gemm]") { \
    mnistdp::testing::skip_unless_supported(ISA);                                                   \
    check_cpu_gather(ISA);                                                                          \
  }

MNISTDP_CPU_GATHER_TEST(mnistdp::cpu::Isa::avx512, "AVX-512")
MNISTDP_CPU_GATHER_TEST(mnistdp::cpu::Isa::avx2, "AVX2")
MNISTDP_CPU_GATHER_TEST(mnistdp::cpu::Isa::portable, "portable")
