// cpu::gather_normalize for CPUs with AVX-512F: compiled with -mavx512f, called only where best_isa() found
// it.
#include <immintrin.h>

#include <cstddef>

#include "kernels/gather.hpp"
#include "kernels/gather_cpu.hpp"

namespace mnistdp::cpu {
namespace {
// Every lane selected. The zero-masked conversions are the same instructions as the plain ones, whose
// undefined pass-through vector GCC 12 reports as maybe-uninitialized.
constexpr __mmask16 kAll = 0xFFFF;
}  // namespace

void gather_normalize_avx512(const std::uint8_t* images, const std::uint8_t* labels,
                             const std::int32_t* indices, float* x, std::uint8_t* y, int batch, int pixels) {
  // ref::normalize_pixel's operations in its order. The division by 255 as the product by its reciprocal,
  // corrected by one fused multiply-add of the remainder: that is the correctly rounded quotient for each of
  // the 256 pixel values (the tests check every one), at a fraction of a vector division's cost, which was
  // most of the gather's. The division by 0.5 as the product by 2, the same exact result.
  const __m512 d255 = _mm512_set1_ps(255.0f), inv255 = _mm512_set1_ps(1.0f / 255.0f),
               half = _mm512_set1_ps(0.5f), two = _mm512_set1_ps(2.0f);
  const auto divide_by_255 = [&](__m512 pixel) {
    const __m512 estimate = _mm512_mul_ps(pixel, inv255);
    const __m512 remainder = _mm512_fnmadd_ps(estimate, d255, pixel);  // pixel - estimate 255, exact
    return _mm512_fmadd_ps(remainder, inv255, estimate);
  };
  const auto row = static_cast<std::size_t>(pixels);
  for (int i = 0; i < batch; ++i) {
    const std::uint8_t* src = images + static_cast<std::size_t>(indices[i]) * row;
    float* dst = x + static_cast<std::size_t>(i) * row;
    std::size_t p = 0;
    for (; p + 16 <= row; p += 16) {
      const __m512 pixel = _mm512_maskz_cvtepi32_ps(
          kAll, _mm512_maskz_cvtepu8_epi32(kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + p))));
      _mm512_storeu_ps(dst + p, _mm512_mul_ps(_mm512_sub_ps(divide_by_255(pixel), half), two));
    }
    for (; p < row; ++p)
      dst[p] = ref::normalize_pixel(src[p]);
    y[i] = labels[indices[i]];
  }
}

}  // namespace mnistdp::cpu
