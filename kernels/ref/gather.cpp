#include "kernels/ref/gather.hpp"

#include <cstddef>

namespace mnistdp::ref {

void gather_normalize(const std::uint8_t* images,   // [n_images, pixels]
                      const std::uint8_t* labels,   // [n_images]
                      const std::int32_t* indices,  // [batch]
                      float* x,                     // [batch, pixels]
                      std::uint8_t* y,              // [batch]
                      int batch, int pixels) {
  const auto row = static_cast<std::size_t>(pixels);
  for (int i = 0; i < batch; ++i) {
    // size_t offsets: 60000 * 784 fits in int, but a larger data set should not silently overflow.
    const std::uint8_t* src = images + static_cast<std::size_t>(indices[i]) * row;
    float* dst = x + static_cast<std::size_t>(i) * row;
    for (std::size_t p = 0; p < row; ++p)
      dst[p] = normalize_pixel(src[p]);
    y[i] = labels[indices[i]];
  }
}

}  // namespace mnistdp::ref
