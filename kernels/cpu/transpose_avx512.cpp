// cpu::transpose's and the row sums' 16 x 16 blocks for CPUs with AVX-512F: compiled with -mavx512f.
#include "kernels/cpu/transpose_blocks.hpp"
#include "kernels/cpu/vector_blocks.hpp"

namespace mnistdp::cpu {

void transpose_blocks_avx512(const float* src, float* dst, int rows, int cols, int block_rows, int col_begin,
                             int col_end) {
  transpose_blocks<Avx512Block>(src, dst, rows, cols, block_rows, col_begin, col_end);
}

void row_sums_blocks_avx512(const float* m, std::ptrdiff_t row_stride, float* sums, int block_rows,
                            int cols) {
  row_sums_blocks<Avx512Block>(m, row_stride, sums, block_rows, cols);
}

}  // namespace mnistdp::cpu
