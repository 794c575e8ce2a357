// cpu::gather_normalize for CPUs with AVX2: compiled with -mavx2, called only where best_isa() found it.
#include <immintrin.h>

#include <cstddef>

#include "kernels/gather.hpp"
#include "kernels/gather_cpu.hpp"

namespace mnistdp::cpu {

void gather_normalize_avx2(const std::uint8_t* images, const std::uint8_t* labels,
                           const std::int32_t* indices, float* x, std::uint8_t* y, int batch, int pixels) {
  // ref::normalize_pixel's operations in its order. The division by 255 as the product by its reciprocal,
  // corrected by one fused multiply-add of the remainder: that is the correctly rounded quotient for each of
  // the 256 pixel values (the tests check every one), at a fraction of a vector division's cost, which was
  // most of the gather's. The division by 0.5 as the product by 2, the same exact result.
  const __m256 d255 = _mm256_set1_ps(255.0f), inv255 = _mm256_set1_ps(1.0f / 255.0f),
               half = _mm256_set1_ps(0.5f), two = _mm256_set1_ps(2.0f);
  const auto divide_by_255 = [&](__m256 pixel) {
    const __m256 estimate = _mm256_mul_ps(pixel, inv255);
    const __m256 remainder = _mm256_fnmadd_ps(estimate, d255, pixel);  // pixel - estimate 255, exact
    return _mm256_fmadd_ps(remainder, inv255, estimate);
  };
  const auto row = static_cast<std::size_t>(pixels);
  for (int i = 0; i < batch; ++i) {
    const std::uint8_t* src = images + static_cast<std::size_t>(indices[i]) * row;
    float* dst = x + static_cast<std::size_t>(i) * row;
    std::size_t p = 0;
    for (; p + 8 <= row; p += 8) {
      const __m256 pixel = _mm256_cvtepi32_ps(
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + p))));
      _mm256_storeu_ps(dst + p, _mm256_mul_ps(_mm256_sub_ps(divide_by_255(pixel), half), two));
    }
    for (; p < row; ++p)
      dst[p] = ref::normalize_pixel(src[p]);
    y[i] = labels[indices[i]];
  }
}

}  // namespace mnistdp::cpu
