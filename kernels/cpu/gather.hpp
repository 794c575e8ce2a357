#pragma once
// The CPU training path's gather: ref::gather_normalize, its pixels converted in the widest vectors the CPU
// has, and optionally written feature-major as well, for the products that read the batch that way. Every
// operation of ref::normalize_pixel is an IEEE operation on exact integers or its rounded result (the
// division by 255 a true division, the one by 0.5 exact), so each version gives its bits.
#include <cstdint>

#include "kernels/cpu/gemm.hpp"

namespace mnistdp::cpu {

// As ref::gather_normalize, with the given instruction set (which this CPU must support); where xT is set,
// the batch is also written there transposed (xT[p, i] = x[i, p]), in square blocks of vectors as each
// block of rows is converted, while its rows are still in registers.
void gather_normalize(Isa isa,
                      const std::uint8_t* images,   // [n_images, pixels]
                      const std::uint8_t* labels,   // [n_images]
                      const std::int32_t* indices,  // [batch], each < n_images
                      float* x,                     // [batch, pixels]
                      float* xT,                    // [pixels, batch], or nullptr
                      std::uint8_t* y,              // [batch]
                      int batch, int pixels);

// Instruction-set versions, each compiled for its own target (kernels/cpu/gather_*.cpp); call
// gather_normalize.
void gather_normalize_avx512(const std::uint8_t* images, const std::uint8_t* labels,
                             const std::int32_t* indices, float* x, float* xT, std::uint8_t* y, int batch,
                             int pixels);
void gather_normalize_avx2(const std::uint8_t* images, const std::uint8_t* labels,
                           const std::int32_t* indices, float* x, float* xT, std::uint8_t* y, int batch,
                           int pixels);

}  // namespace mnistdp::cpu
