#pragma once
// Builds one batch from the uint8 data set: rows picked by index, pixels normalised as the reference
// program's ToTensor() + Normalize((0.5,), (0.5,)) does: x = (p / 255 - 0.5) / 0.5, in float, in that order.
#include <cstdint>

namespace mnistdp::ref {

// images: [n_images, pixels] uint8  labels: [n_images]  indices: [batch], each < n_images
//   -> x: [batch, pixels]  y: [batch]
void gather_normalize(const std::uint8_t* images, const std::uint8_t* labels, const std::int32_t* indices,
                      float* x, std::uint8_t* y, int batch, int pixels);

// The normalisation of one pixel, shared by every implementation so that all agree to the bit.
constexpr float normalize_pixel(std::uint8_t p) {
  return (static_cast<float>(p) / 255.0f - 0.5f) / 0.5f;
}

}  // namespace mnistdp::ref
