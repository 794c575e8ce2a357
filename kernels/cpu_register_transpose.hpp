#pragma once
// Square blocks of floats transposed in vector registers, for the files compiled for the instruction set
// that has them (cpu_transpose_*.cpp, cpu_gather_*.cpp): each definition exists only where the compiler
// targets its instructions, and all are in an anonymous namespace, so that no caller compiled for an older
// CPU can ever be handed a copy compiled for a newer one.
#include <immintrin.h>

namespace mnistdp::cpu {
namespace {

#if defined(__AVX512F__)
// Four rounds of pairing, each twice as coarse as the one before: single floats, pairs of floats, 128-bit
// lanes, pairs of lanes. After them, register i holds column i.
inline void transpose16(__m512 (&r)[16]) {
  // Every lane selected. The zero-masked forms compile to the same instructions as the plain ones, whose
  // undefined pass-through vector GCC 12 reports as maybe-uninitialized.
  constexpr __mmask16 kAll16 = 0xFFFF;
  constexpr __mmask8 kAll8 = 0xFF;
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_ps(kAll16, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_ps(kAll16, r[i], r[i + 1]);
  }
  const auto lo_pd = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(kAll8, _mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  const auto hi_pd = [](__m512 a, __m512 b) {
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
#endif

#if defined(__AVX2__)
// Three rounds of pairing: single floats, pairs of floats, 128-bit lanes. After them, register i holds
// column i.
inline void transpose8(__m256 (&r)[8]) {
  __m256 t[8];
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
#endif

}  // namespace
}  // namespace mnistdp::cpu
