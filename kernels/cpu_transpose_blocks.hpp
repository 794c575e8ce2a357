#pragma once
// The square blocks of cpu::transpose (kernels/linear_cpu.hpp) in vector registers, one version per
// instruction set, each compiled for its own target (cpu_transpose_*.cpp) and called only where best_isa()
// found it. A block is loaded as rows and stored as rows of the transpose: every load and store is a whole
// vector, where the plain loop reads one element from each of a block's rows.
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

}  // namespace mnistdp::cpu
