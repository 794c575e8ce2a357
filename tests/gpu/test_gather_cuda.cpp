// cuda::gather_normalize against ref::gather_normalize: the batch must be equal to the bit (the same uint8
// data must give the same floats on every backend, or the CPU and GPU paths would train on different inputs).
#include <catch2/catch.hpp>

#include "kernels/cuda/ops/gather.hpp"
#include "kernels/ref/gather.hpp"
#include "tests/gpu/gpu_test_util.hpp"

using namespace mnistdp;
using namespace mnistdp::gpu_test;

TEST_CASE("gather_normalize equals the reference to the bit", "[gpu][gather]") {
  const int batch = GENERATE(0, 1, 7, 22, 64, 65);
  const int pixels = GENERATE(1, 4, 33, 784);  // 4 and 784 take the vectorised path, 1 and 33 the scalar one
  CAPTURE(batch, pixels);
  constexpr int kImages = 300;
  Rng rng(static_cast<std::uint64_t>(batch * 1000 + pixels));

  auto images = random_bytes(static_cast<std::size_t>(kImages) * pixels, rng);
  images[0] = 0;  // both ends of the pixel range, whatever the draw
  images[1 % images.size()] = 255;
  const auto labels = random_bytes(kImages, rng, 10);
  std::vector<std::int32_t> indices(static_cast<std::size_t>(batch));
  for (auto& i : indices)
    i = static_cast<std::int32_t>(rng.below(kImages));  // repeats allowed, as in any batch
  if (batch > 0) indices[0] = 0;

  std::vector<float> want_x(static_cast<std::size_t>(batch) * pixels);
  std::vector<std::uint8_t> want_y(static_cast<std::size_t>(batch));
  ref::gather_normalize(images.data(), labels.data(), indices.data(), want_x.data(), want_y.data(), batch,
                        pixels);

  const auto d_images = to_device(images);
  const auto d_labels = to_device(labels);
  const auto d_indices = to_device(indices);
  DeviceBuffer<float> d_x(want_x.size());
  DeviceBuffer<std::uint8_t> d_y(want_y.size());
  poison(d_x);
  poison(d_y);
  Stream stream;
  cuda::gather_normalize(d_images.data(), d_labels.data(), d_indices.data(), d_x.data(), d_y.data(), batch,
                         pixels, stream.get());
  CHECK(bitwise_equal(to_host(d_x), want_x));
  CHECK(bitwise_equal(to_host(d_y), want_y));
}

TEST_CASE("gather_normalize maps every pixel value as ref::normalize_pixel does", "[gpu][gather]") {
  // All 256 values in one row, so that each is checked once against the shared formula.
  std::vector<std::uint8_t> images(256);
  for (int p = 0; p < 256; ++p)
    images[static_cast<std::size_t>(p)] = static_cast<std::uint8_t>(p);
  const std::vector<std::uint8_t> labels{3};
  const std::vector<std::int32_t> indices{0};
  const auto d_images = to_device(images);
  const auto d_labels = to_device(labels);
  const auto d_indices = to_device(indices);
  DeviceBuffer<float> d_x(256);
  DeviceBuffer<std::uint8_t> d_y(1);
  poison(d_x);
  Stream stream;
  cuda::gather_normalize(d_images.data(), d_labels.data(), d_indices.data(), d_x.data(), d_y.data(), 1, 256,
                         stream.get());
  const auto x = to_host(d_x);
  for (int p = 0; p < 256; ++p) {
    CAPTURE(p);
    const float want = ref::normalize_pixel(static_cast<std::uint8_t>(p));
    CHECK(std::memcmp(&x[static_cast<std::size_t>(p)], &want, sizeof(float)) == 0);
  }
  CHECK(to_host(d_y)[0] == 3);
}
