// cpu::transpose's 8 x 8 blocks for CPUs with AVX2: compiled with -mavx2.
#include <immintrin.h>

#include "kernels/cpu_transpose_blocks.hpp"

namespace mnistdp::cpu {
namespace {

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

}  // namespace

void transpose_blocks_avx2(const float* src, float* dst, int rows, int cols, int block_rows, int col_begin,
                           int col_end) {
  for (int r0 = 0; r0 < block_rows; r0 += 8)
    for (int c0 = col_begin; c0 < col_end; c0 += 8) {
      __m256 v[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i)
        v[i] = _mm256_loadu_ps(src + static_cast<std::ptrdiff_t>(r0 + i) * cols + c0);
      transpose8(v);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i)
        _mm256_storeu_ps(dst + static_cast<std::ptrdiff_t>(c0 + i) * rows + r0, v[i]);
    }
}

}  // namespace mnistdp::cpu
