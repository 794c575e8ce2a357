// Gather + normalise: one block per row of the batch.
#include <cstdint>
#include <stdexcept>

#include "kernels/cuda/ops/gather.hpp"
#include "kernels/cuda/ops/normalize_pixel.cuh"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/launch.cuh"

namespace mnistdp::cuda {
namespace {

constexpr int kThreads = 256;

using detail::normalize_pixel;

// kVec4: pixels % 4 == 0 and the bases aligned, so every row starts 4-byte aligned in images and 16-byte
// aligned in x; each thread then moves 4 pixels with one 32-bit load and one 128-bit store.
// kDeviceFirst: the batch's indices start at indices + *first, an offset read from device memory, so that a
// CUDA graph that froze the kernel's arguments can still walk through the epoch's order; otherwise first is
// not read (nullptr) and the indices start at `indices`.
template <bool kVec4, bool kDeviceFirst>
__global__ void __launch_bounds__(kThreads)
    gather_normalize_kernel(const std::uint8_t* __restrict__ images,   // [n_images, pixels]
                            const std::uint8_t* __restrict__ labels,   // [n_images]
                            const std::int32_t* __restrict__ indices,  // [batch], or [*first + batch]
                            const int* __restrict__ first,             // [1] when kDeviceFirst, else nullptr
                            float* __restrict__ x,                     // [batch, pixels]
                            std::uint8_t* __restrict__ y,              // [batch]
                            int pixels) {
  const int row = blockIdx.x;
  long src_row = 0;
  if constexpr (kDeviceFirst) {
    src_row = indices[*first + row];
  } else {
    src_row = indices[row];
  }
  const std::uint8_t* __restrict__ src = images + src_row * pixels;
  float* __restrict__ dst = x + static_cast<long>(row) * pixels;
  if constexpr (kVec4) {
    const auto* src4 = reinterpret_cast<const uchar4*>(src);
    auto* dst4 = reinterpret_cast<float4*>(dst);
    for (int i = threadIdx.x; i < pixels / 4; i += kThreads) {
      const uchar4 q = src4[i];
      dst4[i] =
          make_float4(normalize_pixel(q.x), normalize_pixel(q.y), normalize_pixel(q.z), normalize_pixel(q.w));
    }
  } else {
    for (int i = threadIdx.x; i < pixels; i += kThreads)
      dst[i] = normalize_pixel(src[i]);
  }
  if (threadIdx.x == 0) y[row] = labels[src_row];
}

template <bool kDeviceFirst>
void launch_gather(const std::uint8_t* images, const std::uint8_t* labels, const std::int32_t* indices,
                   const int* first, float* x, std::uint8_t* y, int batch, int pixels, cudaStream_t stream) {
  if (batch < 0 || pixels < 0) throw std::invalid_argument("gather_normalize: negative size");
  if (batch == 0) return;
  const bool aligned =
      reinterpret_cast<std::uintptr_t>(images) % 4 == 0 && reinterpret_cast<std::uintptr_t>(x) % 16 == 0;
  if (pixels % 4 == 0 && aligned) {
    detail::launch<gather_normalize_kernel<true, kDeviceFirst>>(batch, kThreads, 0, stream, images, labels,
                                                                indices, first, x, y, pixels);
  } else {
    detail::launch<gather_normalize_kernel<false, kDeviceFirst>>(batch, kThreads, 0, stream, images, labels,
                                                                 indices, first, x, y, pixels);
  }
}

}  // namespace

void gather_normalize(const std::uint8_t* images, const std::uint8_t* labels, const std::int32_t* indices,
                      float* x, std::uint8_t* y, int batch, int pixels, cudaStream_t stream) {
  launch_gather<false>(images, labels, indices, nullptr, x, y, batch, pixels, stream);
}

void gather_normalize_at(const std::uint8_t* images, const std::uint8_t* labels, const std::int32_t* order,
                         const int* first, float* x, std::uint8_t* y, int batch, int pixels,
                         cudaStream_t stream) {
  if (!first) throw std::invalid_argument("gather_normalize_at: no device offset");
  launch_gather<true>(images, labels, order, first, x, y, batch, pixels, stream);
}

}  // namespace mnistdp::cuda
