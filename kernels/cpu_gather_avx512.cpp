// cpu::gather_normalize for CPUs with AVX-512F: compiled with -mavx512f, called only where best_isa() found
// it.
#include <immintrin.h>

#include <cstddef>

#include "kernels/cpu_register_transpose.hpp"
#include "kernels/gather.hpp"
#include "kernels/gather_cpu.hpp"

namespace mnistdp::cpu {
namespace {

// Every lane selected. The zero-masked conversions are the same instructions as the plain ones, whose
// undefined pass-through vector GCC 12 reports as maybe-uninitialized.
constexpr __mmask16 kAll = 0xFFFF;
constexpr int kLanes = 16;

// ref::normalize_pixel's operations in its order on 16 pixels. The division by 255 as the product by its
// reciprocal, corrected by one fused multiply-add of the remainder: that is the correctly rounded quotient
// for each of the 256 pixel values (the tests check every one), at a fraction of a vector division's cost,
// which was most of the gather's. The division by 0.5 as the product by 2, the same exact result.
inline __m512 normalize16(const std::uint8_t* pixels) {
  const __m512 d255 = _mm512_set1_ps(255.0f), inv255 = _mm512_set1_ps(1.0f / 255.0f);
  const __m512 pixel = _mm512_maskz_cvtepi32_ps(
      kAll, _mm512_maskz_cvtepu8_epi32(kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(pixels))));
  const __m512 estimate = _mm512_mul_ps(pixel, inv255);
  const __m512 remainder = _mm512_fnmadd_ps(estimate, d255, pixel);  // pixel - estimate 255, exact
  const __m512 quotient = _mm512_fmadd_ps(remainder, inv255, estimate);
  return _mm512_mul_ps(_mm512_sub_ps(quotient, _mm512_set1_ps(0.5f)), _mm512_set1_ps(2.0f));
}

}  // namespace

void gather_normalize_avx512(const std::uint8_t* images, const std::uint8_t* labels,
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
  // With xT: 16 rows at a time, each 16 pixels of them converted, stored as rows, turned and stored again.
  if (xT != nullptr)
    for (; i0 + kLanes <= batch; i0 += kLanes) {
      const std::uint8_t* src[kLanes];
      for (int i = 0; i < kLanes; ++i)
        src[i] = image(i0 + i);
      for (int p = 0; p < vector_pixels; p += kLanes) {
        __m512 v[kLanes];
#pragma GCC unroll 16
        for (int i = 0; i < kLanes; ++i) {
          v[i] = normalize16(src[i] + p);
          _mm512_storeu_ps(x + static_cast<std::size_t>(i0 + i) * row + p, v[i]);
        }
        transpose16(v);
#pragma GCC unroll 16
        for (int j = 0; j < kLanes; ++j)
          _mm512_storeu_ps(xT + static_cast<std::size_t>(p + j) * batch + i0, v[j]);
      }
      for (int i = 0; i < kLanes; ++i)
        tail(i0 + i, src[i]);
    }
  // The rows left (every row without xT) one at a time, each element into xT alone.
  for (int i = i0; i < batch; ++i) {
    const std::uint8_t* src = image(i);
    float* dst = x + static_cast<std::size_t>(i) * row;
    for (int p = 0; p < vector_pixels; p += kLanes) {
      const __m512 v = normalize16(src + p);
      _mm512_storeu_ps(dst + p, v);
      if (xT == nullptr) continue;
      alignas(64) float lanes[kLanes];
      _mm512_store_ps(lanes, v);
      for (int l = 0; l < kLanes; ++l)
        xT[static_cast<std::size_t>(p + l) * batch + i] = lanes[l];
    }
    tail(i, src);
  }
}

}  // namespace mnistdp::cpu
