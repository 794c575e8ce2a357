// cpu::transpose's 16 x 16 blocks for CPUs with AVX-512F: compiled with -mavx512f.
#include <immintrin.h>

#include "kernels/cpu_transpose_blocks.hpp"

namespace mnistdp::cpu {
namespace {

// Every lane selected. The zero-masked forms compile to the same instructions as the plain ones, whose
// undefined pass-through vector GCC 12 reports as maybe-uninitialized.
constexpr __mmask16 kAll16 = 0xFFFF;
constexpr __mmask8 kAll8 = 0xFF;

// Four rounds of pairing, each twice as coarse as the one before: single floats, pairs of floats, 128-bit
// lanes, pairs of lanes. After them, register i holds column i.
inline void transpose16(__m512 (&r)[16]) {
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

}  // namespace

void transpose_blocks_avx512(const float* src, float* dst, int rows, int cols, int block_rows, int col_begin,
                             int col_end) {
  for (int r0 = 0; r0 < block_rows; r0 += 16)
    for (int c0 = col_begin; c0 < col_end; c0 += 16) {
      __m512 v[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        v[i] = _mm512_loadu_ps(src + static_cast<std::ptrdiff_t>(r0 + i) * cols + c0);
      transpose16(v);
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        _mm512_storeu_ps(dst + static_cast<std::ptrdiff_t>(c0 + i) * rows + r0, v[i]);
    }
}

}  // namespace mnistdp::cpu
