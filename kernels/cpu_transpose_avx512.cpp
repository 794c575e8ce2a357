// cpu::transpose's and the row sums' 16 x 16 blocks for CPUs with AVX-512F: compiled with -mavx512f.
#include <immintrin.h>

#include "kernels/cpu_register_transpose.hpp"
#include "kernels/cpu_transpose_blocks.hpp"

namespace mnistdp::cpu {

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

void row_sums_blocks_avx512(const float* m, std::ptrdiff_t row_stride, float* sums, int block_rows,
                            int cols) {
  const int block_cols = cols - cols % 16;
  for (int r0 = 0; r0 < block_rows; r0 += 16) {
    const float* rows = m + static_cast<std::ptrdiff_t>(r0) * row_stride;
    __m512 sum = _mm512_setzero_ps();
    for (int c0 = 0; c0 < block_cols; c0 += 16) {
      __m512 v[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        v[i] = _mm512_loadu_ps(rows + i * row_stride + c0);
      transpose16(v);
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j)
        sum = _mm512_add_ps(sum, v[j]);
    }
    for (int c = block_cols; c < cols; ++c) {
      alignas(64) float column[16];
      for (int i = 0; i < 16; ++i)
        column[i] = rows[i * row_stride + c];
      sum = _mm512_add_ps(sum, _mm512_load_ps(column));
    }
    _mm512_storeu_ps(sums + r0, sum);
  }
}

}  // namespace mnistdp::cpu
