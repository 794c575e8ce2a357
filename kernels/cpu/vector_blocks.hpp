#pragma once
// Square blocks of floats in vector registers, and the operations built on turning them, written once for any
// instruction set: cpu::transpose's blocks, the bias gradients' row sums, and the gather that writes the
// batch both by rows and feature-major. Each instruction set's file (kernels/cpu/transpose_*.cpp,
// gather_*.cpp) is compiled for its own target and instantiates them with its block type, which exists only
// where the compiler targets its instructions. Everything is in an anonymous namespace, so that no caller
// compiled for an older CPU can be handed a copy compiled for a newer one.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/ref/gather.hpp"

namespace mnistdp::cpu {
namespace {

// A block type B provides: T (the vector), kSide (floats in a T, and rows in a block), zero(), load(p),
// store(p, v), add(a, b), transpose(T (&rows)[kSide]) (after which register i holds column i), and
// normalize(pixels): ref::normalize_pixel of kSide consecutive pixels, the same bits.
//
// normalize: ref::normalize_pixel's operations in its order, except that the division by 255 is the product
// by its reciprocal corrected by one fused multiply-add of the remainder. That is the correctly rounded
// quotient for each of the 256 pixel values (the tests check every one), at a fraction of a vector division's
// cost, which was most of the gather's. The division by 0.5 is the product by 2, the same exact result.

#if defined(__AVX512F__)
struct Avx512Block {
  using T = __m512;
  static constexpr int kSide = 16;
  // Every lane selected. The zero-masked forms compile to the same instructions as the plain ones, whose
  // undefined pass-through vector GCC 12 reports as maybe-uninitialized.
  static constexpr __mmask16 kAll16 = 0xFFFF;
  static constexpr __mmask8 kAll8 = 0xFF;

  static T zero() { return _mm512_setzero_ps(); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }

  // Four rounds of pairing, each twice as coarse as the one before: single floats, pairs of floats, 128-bit
  // lanes, pairs of lanes.
  static void transpose(T (&r)[kSide]) {
    T t[kSide];
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_maskz_unpacklo_ps(kAll16, r[i], r[i + 1]);
      t[i + 1] = _mm512_maskz_unpackhi_ps(kAll16, r[i], r[i + 1]);
    }
    const auto lo_pd = [](T a, T b) {
      return _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(kAll8, _mm512_castps_pd(a), _mm512_castps_pd(b)));
    };
    const auto hi_pd = [](T a, T b) {
      return _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(kAll8, _mm512_castps_pd(a), _mm512_castps_pd(b)));
    };
    for (int i = 0; i < 16; i += 4) {
      r[i] = lo_pd(t[i], t[i + 2]);
      r[i + 1] = hi_pd(t[i], t[i + 2]);
      r[i + 2] = lo_pd(t[i + 1], t[i + 3]);
      r[i + 3] = hi_pd(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 16; i += 8)
      for (int j = 0; j < 4; ++j) {
        t[i + j] = _mm512_maskz_shuffle_f32x4(kAll16, r[i + j], r[i + j + 4], 0x88);
        t[i + j + 4] = _mm512_maskz_shuffle_f32x4(kAll16, r[i + j], r[i + j + 4], 0xdd);
      }
    for (int j = 0; j < 8; ++j) {
      r[j] = _mm512_maskz_shuffle_f32x4(kAll16, t[j], t[j + 8], 0x88);
      r[j + 8] = _mm512_maskz_shuffle_f32x4(kAll16, t[j], t[j + 8], 0xdd);
    }
  }

  static T normalize(const std::uint8_t* pixels) {
    const T d255 = _mm512_set1_ps(255.0f), inv255 = _mm512_set1_ps(1.0f / 255.0f);
    const T pixel = _mm512_maskz_cvtepi32_ps(
        kAll16,
        _mm512_maskz_cvtepu8_epi32(kAll16, _mm_loadu_si128(reinterpret_cast<const __m128i*>(pixels))));
    const T estimate = _mm512_mul_ps(pixel, inv255);
    const T remainder = _mm512_fnmadd_ps(estimate, d255, pixel);  // pixel - estimate 255, exact
    const T quotient = _mm512_fmadd_ps(remainder, inv255, estimate);
    return _mm512_mul_ps(_mm512_sub_ps(quotient, _mm512_set1_ps(0.5f)), _mm512_set1_ps(2.0f));
  }
};
#endif

#if defined(__AVX2__) && defined(__FMA__)
struct Avx2Block {
  using T = __m256;
  static constexpr int kSide = 8;

  static T zero() { return _mm256_setzero_ps(); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }

  // Three rounds of pairing: single floats, pairs of floats, 128-bit lanes.
  static void transpose(T (&r)[kSide]) {
    T t[kSide];
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
      r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
      r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int j = 0; j < 4; ++j) {
      t[j] = _mm256_permute2f128_ps(r[j], r[j + 4], 0x20);
      t[j + 4] = _mm256_permute2f128_ps(r[j], r[j + 4], 0x31);
    }
    for (int i = 0; i < 8; ++i)
      r[i] = t[i];
  }

  static T normalize(const std::uint8_t* pixels) {
    const T d255 = _mm256_set1_ps(255.0f), inv255 = _mm256_set1_ps(1.0f / 255.0f);
    const T pixel =
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(pixels))));
    const T estimate = _mm256_mul_ps(pixel, inv255);
    const T remainder = _mm256_fnmadd_ps(estimate, d255, pixel);  // pixel - estimate 255, exact
    const T quotient = _mm256_fmadd_ps(remainder, inv255, estimate);
    return _mm256_mul_ps(_mm256_sub_ps(quotient, _mm256_set1_ps(0.5f)), _mm256_set1_ps(2.0f));
  }
};
#endif

// cpu::transpose's blocks (kernels/cpu/transpose_blocks.hpp): each loaded as rows, turned, stored as rows of
// the transpose.
template <class B>
void transpose_blocks(const float* src, float* dst, int rows, int cols, int block_rows, int col_begin,
                      int col_end) {
  constexpr int S = B::kSide;
  for (int r0 = 0; r0 < block_rows; r0 += S)
    for (int c0 = col_begin; c0 < col_end; c0 += S) {
      typename B::T v[S];
#pragma GCC unroll 16
      for (int i = 0; i < S; ++i)
        v[i] = B::load(src + static_cast<std::ptrdiff_t>(r0 + i) * cols + c0);
      B::transpose(v);
#pragma GCC unroll 16
      for (int i = 0; i < S; ++i)
        B::store(dst + static_cast<std::ptrdiff_t>(c0 + i) * rows + r0, v[i]);
    }
}

// The row sums' blocks (kernels/cpu/transpose_blocks.hpp): each turned, so that its columns are vectors that
// a lane per row adds one after another.
template <class B>
void row_sums_blocks(const float* m, std::ptrdiff_t row_stride, float* sums, int block_rows, int cols) {
  constexpr int S = B::kSide;
  const int block_cols = cols - cols % S;
  for (int r0 = 0; r0 < block_rows; r0 += S) {
    const float* rows = m + static_cast<std::ptrdiff_t>(r0) * row_stride;
    typename B::T sum = B::zero();
    for (int c0 = 0; c0 < block_cols; c0 += S) {
      typename B::T v[S];
#pragma GCC unroll 16
      for (int i = 0; i < S; ++i)
        v[i] = B::load(rows + i * row_stride + c0);
      B::transpose(v);
#pragma GCC unroll 16
      for (int j = 0; j < S; ++j)
        sum = B::add(sum, v[j]);
    }
    for (int c = block_cols; c < cols; ++c) {
      float column[S];
      for (int i = 0; i < S; ++i)
        column[i] = rows[i * row_stride + c];
      sum = B::add(sum, B::load(column));
    }
    B::store(sums + r0, sum);
  }
}

// cpu::gather_normalize (kernels/cpu/gather.hpp). With xT, kSide rows at a time: each kSide pixels of them
// normalised, stored as rows, turned and stored again as columns. The rows left (every row without xT) one at
// a time, each element into xT alone; the pixels past the last whole vector one at a time.
template <class B>
void gather_normalize_blocks(const std::uint8_t* images, const std::uint8_t* labels,
                             const std::int32_t* indices, float* x, float* xT, std::uint8_t* y, int batch,
                             int pixels) {
  constexpr int S = B::kSide;
  const auto row = static_cast<std::size_t>(pixels);
  const int vector_pixels = pixels - pixels % S;
  const auto image = [&](int i) { return images + static_cast<std::size_t>(indices[i]) * row; };
  const auto tail = [&](int i, const std::uint8_t* src) {
    for (int p = vector_pixels; p < pixels; ++p) {
      const float value = ref::normalize_pixel(src[p]);
      x[static_cast<std::size_t>(i) * row + p] = value;
      if (xT != nullptr) xT[static_cast<std::size_t>(p) * batch + i] = value;
    }
    y[i] = labels[indices[i]];
  };
  int i0 = 0;
  if (xT != nullptr)
    for (; i0 + S <= batch; i0 += S) {
      const std::uint8_t* src[S];
      for (int i = 0; i < S; ++i)
        src[i] = image(i0 + i);
      for (int p = 0; p < vector_pixels; p += S) {
        typename B::T v[S];
#pragma GCC unroll 16
        for (int i = 0; i < S; ++i) {
          v[i] = B::normalize(src[i] + p);
          B::store(x + static_cast<std::size_t>(i0 + i) * row + p, v[i]);
        }
        B::transpose(v);
#pragma GCC unroll 16
        for (int j = 0; j < S; ++j)
          B::store(xT + static_cast<std::size_t>(p + j) * batch + i0, v[j]);
      }
      for (int i = 0; i < S; ++i)
        tail(i0 + i, src[i]);
    }
  for (int i = i0; i < batch; ++i) {
    const std::uint8_t* src = image(i);
    float* dst = x + static_cast<std::size_t>(i) * row;
    for (int p = 0; p < vector_pixels; p += S) {
      B::store(dst + p, B::normalize(src + p));
      if (xT == nullptr) continue;
      for (int l = 0; l < S; ++l)
        xT[static_cast<std::size_t>(p + l) * batch + i] = dst[p + l];
    }
    tail(i, src);
  }
}

}  // namespace
}  // namespace mnistdp::cpu
