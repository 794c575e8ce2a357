// cpu::gather_normalize for CPUs with AVX2: compiled with -mavx2 -mfma, called only where best_isa() found
// them.
#include <immintrin.h>

#include <cstddef>

#include "kernels/cpu_register_transpose.hpp"
#include "kernels/gather.hpp"
#include "kernels/gather_cpu.hpp"

namespace mnistdp::cpu {
namespace {

constexpr int kLanes = 8;

// ref::normalize_pixel's operations in its order on 8 pixels, as cpu_gather_avx512.cpp's normalize16 does
// them: the division by 255 as the product by its reciprocal corrected by one fused multiply-add (the
// correctly rounded quotient for each of the 256 pixel values), the division by 0.5 as the product by 2.
inline __m256 normalize8(const std::uint8_t* pixels) {
  const __m256 d255 = _mm256_set1_ps(255.0f), inv255 = _mm256_set1_ps(1.0f / 255.0f);
  const __m256 pixel =
      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(pixels))));
  const __m256 estimate = _mm256_mul_ps(pixel, inv255);
  const __m256 remainder = _mm256_fnmadd_ps(estimate, d255, pixel);  // pixel - estimate 255, exact
  const __m256 quotient = _mm256_fmadd_ps(remainder, inv255, estimate);
  return _mm256_mul_ps(_mm256_sub_ps(quotient, _mm256_set1_ps(0.5f)), _mm256_set1_ps(2.0f));
}

}  // namespace

void gather_normalize_avx2(const std::uint8_t* images, const std::uint8_t* labels,
                           const std::int32_t* indices, float* x, float* xT, std::uint8_t* y, int batch,
                           int pixels) {
  const auto row = static_cast<std::size_t>(pixels);
  const int vector_pixels = pixels - pixels % kLanes;
  const auto image = [&](int i) { return images + static_cast<std::size_t>(indices[i]) * row; };
  // The pixels past the last whole vector, one at a time.
  const auto tail = [&](int i, const std::uint8_t* src) {
    for (int p = vector_pixels; p < pixels; ++p) {
      const float value = ref::normalize_pixel(src[p]);
      x[static_cast<std::size_t>(i) * row + p] = value;
      if (xT != nullptr) xT[static_cast<std::size_t>(p) * batch + i] = value;
    }
    y[i] = labels[indices[i]];
  };
  int i0 = 0;
  // With xT: 8 rows at a time, each 8 pixels of them converted, stored as rows, turned and stored again.
  if (xT != nullptr)
    for (; i0 + kLanes <= batch; i0 += kLanes) {
      const std::uint8_t* src[kLanes];
      for (int i = 0; i < kLanes; ++i)
        src[i] = image(i0 + i);
      for (int p = 0; p < vector_pixels; p += kLanes) {
        __m256 v[kLanes];
#pragma GCC unroll 8
        for (int i = 0; i < kLanes; ++i) {
          v[i] = normalize8(src[i] + p);
          _mm256_storeu_ps(x + static_cast<std::size_t>(i0 + i) * row + p, v[i]);
        }
        transpose8(v);
#pragma GCC unroll 8
        for (int j = 0; j < kLanes; ++j)
          _mm256_storeu_ps(xT + static_cast<std::size_t>(p + j) * batch + i0, v[j]);
      }
      for (int i = 0; i < kLanes; ++i)
        tail(i0 + i, src[i]);
    }
  // The rows left (every row without xT) one at a time, each element into xT alone.
  for (int i = i0; i < batch; ++i) {
    const std::uint8_t* src = image(i);
    float* dst = x + static_cast<std::size_t>(i) * row;
    for (int p = 0; p < vector_pixels; p += kLanes) {
      const __m256 v = normalize8(src + p);
      _mm256_storeu_ps(dst + p, v);
      if (xT == nullptr) continue;
      alignas(32) float lanes[kLanes];
      _mm256_store_ps(lanes, v);
      for (int l = 0; l < kLanes; ++l)
        xT[static_cast<std::size_t>(p + l) * batch + i] = lanes[l];
    }
    tail(i, src);
  }
}

}  // namespace mnistdp::cpu
