// cpu::transpose's and the row sums' 8 x 8 blocks for CPUs with AVX2 and FMA: compiled with -mavx2 -mfma.
#include "kernels/cpu/transpose_blocks.hpp"
#include "kernels/cpu/vector_blocks.hpp"

namespace mnistdp::cpu {

void transpose_blocks_avx2(const float* src, float* dst, int rows, int cols, int block_rows, int col_begin,
                           int col_end) {
  transpose_blocks<Avx2Block>(src, dst, rows, cols, block_rows, col_begin, col_end);
}

void row_sums_blocks_avx2(const float* m, std::ptrdiff_t row_stride, float* sums, int block_rows, int cols) {
  row_sums_blocks<Avx2Block>(m, row_stride, sums, block_rows, cols);
}

}  // namespace mnistdp::cpu
