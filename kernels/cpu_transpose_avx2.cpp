// cpu::transpose's and the row sums' 8 x 8 blocks for CPUs with AVX2: compiled with -mavx2.
#include <immintrin.h>

#include "kernels/cpu_register_transpose.hpp"
#include "kernels/cpu_transpose_blocks.hpp"

namespace mnistdp::cpu {

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

void row_sums_blocks_avx2(const float* m, std::ptrdiff_t row_stride, float* sums, int block_rows, int cols) {
  const int block_cols = cols - cols % 8;
  for (int r0 = 0; r0 < block_rows; r0 += 8) {
    const float* rows = m + static_cast<std::ptrdiff_t>(r0) * row_stride;
    __m256 sum = _mm256_setzero_ps();
    for (int c0 = 0; c0 < block_cols; c0 += 8) {
      __m256 v[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i)
        v[i] = _mm256_loadu_ps(rows + i * row_stride + c0);
      transpose8(v);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j)
        sum = _mm256_add_ps(sum, v[j]);
    }
    for (int c = block_cols; c < cols; ++c) {
      alignas(32) float column[8];
      for (int i = 0; i < 8; ++i)
        column[i] = rows[i * row_stride + c];
      sum = _mm256_add_ps(sum, _mm256_load_ps(column));
    }
    _mm256_storeu_ps(sums + r0, sum);
  }
}

}  // namespace mnistdp::cpu
