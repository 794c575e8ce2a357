#pragma once
// The square blocks of cpu::transpose, and of the bias gradients' row sums (kernels/cpu/linear.hpp), turned
// in vector registers, one version per instruction set, each compiled for its own target
// (kernels/cpu/transpose_*.cpp) and called only where best_isa() found it. A block is loaded as rows and
// turned: every load and store is a whole vector, where the plain loop reads one element from each of a
// block's rows.
#include <cstddef>

namespace mnistdp::cpu {

// dst[c, r] = src[r, c] for r in [0, block_rows) and c in [col_begin, col_end), where block_rows, col_begin
// and col_end are multiples of the block's side: 16 for AVX-512, 8 for AVX2. rows and cols are the whole
// matrix's, its row strides.
void transpose_blocks_avx512(const float* src,  // [rows, cols]
                             float* dst,        // [cols, rows]
                             int rows, int cols, int block_rows, int col_begin, int col_end);
void transpose_blocks_avx2(const float* src,  // [rows, cols]
                           float* dst,        // [cols, rows]
                           int rows, int cols, int block_rows, int col_begin, int col_end);

// sums[r] = m[r, 0] + m[r, 1] + ... + m[r, cols - 1], added in that order from 0 with one rounding an add, as
// a plain loop adds them, for r in [0, block_rows), block_rows a multiple of the block's side: each block of
// rows is turned in registers, so that its columns are vectors that a lane per row adds one after another.
void row_sums_blocks_avx512(const float* m,  // [rows, row_stride]
                            std::ptrdiff_t row_stride, float* sums, int block_rows, int cols);
void row_sums_blocks_avx2(const float* m,  // [rows, row_stride]
                          std::ptrdiff_t row_stride, float* sums, int block_rows, int cols);

}  // namespace mnistdp::cpu
