// cpu::transpose's 8 x 8 blocks for CPUs with AVX2: compiled with -mavx2.
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

}  // namespace mnistdp::cpu
