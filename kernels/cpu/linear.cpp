// The feature-major linear layer as cpu::gemm calls. Each sum is one accumulator in index order, so the bias
// gradients, computed as products with a vector of ones, are ref::'s sums to the bit.
#include "kernels/cpu/linear.hpp"

#include <cstddef>
#include <stdexcept>
#include <string>

#include "kernels/cpu/isa_dispatch.hpp"
#include "kernels/cpu/transpose_blocks.hpp"

namespace mnistdp::cpu {

Range share(int n, Part part, int align) {
  const int units = (n + align - 1) / align;
  const auto at = [&](int index) {
    const int unit = static_cast<int>(static_cast<long long>(units) * index / part.count);
    return unit * align < n ? unit * align : n;
  };
  return {at(part.index), at(part.index + 1)};
}

namespace {
// Rows of a product's output per part: whole register tiles of every instruction set (6 and 4 rows).
constexpr int kRowAlign = 12;

// The elements of rows [r0, r1) and columns [c0, c1), in square blocks small enough that a block's source
// rows and destination rows all stay in L1.
void transpose_plain(const float* src, float* dst, int rows, int cols, int r0, int r1, int c0, int c1) {
  constexpr int kBlock = 16;
  for (int rb = r0; rb < r1; rb += kBlock) {
    const int re = rb + kBlock < r1 ? rb + kBlock : r1;
    for (int cb = c0; cb < c1; cb += kBlock) {
      const int ce = cb + kBlock < c1 ? cb + kBlock : c1;
      for (int c = cb; c < ce; ++c)
        for (int r = rb; r < re; ++r)
          dst[static_cast<std::ptrdiff_t>(c) * rows + r] = src[static_cast<std::ptrdiff_t>(r) * cols + c];
    }
  }
}

// sums[i] = the sum over l of m[i * row_stride + l * col_stride], in order l = 0, 1, ...: rows stored
// contiguously in blocks turned in registers where the instruction set has them, the rest as a product with
// a vector of ones (fma(a, 1, s) rounds as s + a does), which gives one useful lane in each vector.
void row_sums(Isa isa, const float* m, std::ptrdiff_t row_stride, std::ptrdiff_t col_stride,
              const float* ones, float* sums, int rows, int cols) {
  using Blocks = void(const float*, std::ptrdiff_t, float*, int, int);
  Blocks* blocks = version<Blocks>(
      isa, "cpu::row_sums",
      {MNISTDP_X86_VERSION(row_sums_blocks_avx512), MNISTDP_X86_VERSION(row_sums_blocks_avx2), nullptr});
  const int side = isa == Isa::avx512 ? 16 : isa == Isa::avx2 ? 8 : 0;
  const int block_rows = blocks != nullptr && col_stride == 1 ? rows - rows % side : 0;
  if (block_rows > 0) blocks(m, row_stride, sums, block_rows, cols);
  Gemm g;
  g.m = rows - block_rows, g.n = 1, g.k = cols;
  g.a = m + block_rows * row_stride, g.a_row_stride = row_stride, g.a_col_stride = col_stride;
  g.b = ones, g.ldb = 1;
  g.c = sums + block_rows, g.ldc = 1;
  gemm(isa, g);
}
}  // namespace

void transpose(Isa isa, const float* src, float* dst, int rows, int cols, Part part) {
  // Shares of whole 16-column blocks: every share but the last is whole blocks of either vector version.
  const Range mine = share(cols, part, 16);
  using Blocks = void(const float*, float*, int, int, int, int, int);
  Blocks* blocks = version<Blocks>(
      isa, "cpu::transpose",
      {MNISTDP_X86_VERSION(transpose_blocks_avx512), MNISTDP_X86_VERSION(transpose_blocks_avx2), nullptr});
  const int side = isa == Isa::avx512 ? 16 : isa == Isa::avx2 ? 8 : 0;  // the blocks' side; 0: no blocks
  const int block_rows = blocks == nullptr ? 0 : rows - rows % side;
  const int block_end = blocks == nullptr ? mine.begin : mine.end - (mine.end - mine.begin) % side;
  if (block_rows > 0 && block_end > mine.begin)
    blocks(src, dst, rows, cols, block_rows, mine.begin, block_end);
  // What the blocks leave: the columns past the last whole block, then the rows past the last whole block.
  transpose_plain(src, dst, rows, cols, 0, block_rows, block_end, mine.end);
  transpose_plain(src, dst, rows, cols, block_rows, rows, mine.begin, mine.end);
}

namespace {
// Whether cpu::gemm's epilogue applies the activation (and ReLU's derivative) itself, as vectors.
bool in_epilogue(Activation act) {
  return act == Activation::identity || act == Activation::relu;
}

// m[r, c] = f(m[r, c], other[r, c]) over rows `rows` and columns `columns` of two [rows, stride] matrices:
// the pass of an activation without a vector form, through the scalar function ref:: calls.
template <class F>
void elementwise(float* m, const float* other, std::ptrdiff_t stride, Range rows, Range columns, F f) {
  for (int r = rows.begin; r < rows.end; ++r)
    for (int c = columns.begin; c < columns.end; ++c) {
      const std::ptrdiff_t at = r * stride + c;
      m[at] = f(m[at], other[at]);
    }
}

// yT = act(w xT + b) (and zT = w xT + b where given) for the output rows `rows` and the batch's columns
// `columns`.
void forward_block(Isa isa, const float* w, const float* b, const float* xT, float* yT, float* zT,
                   LinearShape s, Activation act, Range rows, Range columns) {
  if (zT != nullptr && !keeps_pre_activation(act))
    throw std::invalid_argument(std::string("cpu::linear_forward: ") + activation_name(act) +
                                " keeps no pre-activation");
  Gemm g;
  g.m = rows.end - rows.begin, g.n = columns.end - columns.begin, g.k = s.in;
  g.a = w + static_cast<std::ptrdiff_t>(rows.begin) * s.in, g.a_row_stride = s.in, g.a_col_stride = 1;
  g.b = xT + columns.begin, g.ldb = s.batch;
  g.epilogue.row_bias = b + rows.begin;
  // The product and bias into zT where it is kept, then the activation from it into yT.
  float* out = in_epilogue(act) || zT == nullptr ? yT : zT;
  g.c = out + static_cast<std::ptrdiff_t>(rows.begin) * s.batch + columns.begin, g.ldc = s.batch;
  g.epilogue.activation = in_epilogue(act) ? act : Activation::identity;
  gemm(isa, g);
  if (in_epilogue(act)) return;
  with_activation(act, [&](auto id) {
    using A = ActivationFn<decltype(id)::value>;
    if (out != yT)
      elementwise(yT, out, s.batch, rows, columns, [](float, float z) { return A::forward(z); });
    else
      elementwise(yT, yT, s.batch, rows, columns, [](float z, float) { return A::forward(z); });
  });
}
}  // namespace

void linear_forward(Isa isa, const float* w, const float* b, const float* xT, float* yT, LinearShape s,
                    Activation act, float* zT, Part part) {
  forward_block(isa, w, b, xT, yT, zT, s, act, share(s.out, part, kRowAlign), {0, s.batch});
}

void linear_forward_by_columns(Isa isa, const float* w, const float* b, const float* xT, float* yT,
                               LinearShape s, Activation act, float* zT, Part part) {
  forward_block(isa, w, b, xT, yT, zT, s, act, {0, s.out}, share(s.batch, part, kBatchAlign));
}

void weight_gradient(Isa isa, const float* dyT, const float* x, const float* ones, float* dw, float* db,
                     LinearShape s, Part part, const WeightUpdate* update) {
  const Range rows = share(s.out, part, kRowAlign);
  const float* my_dyT = dyT + static_cast<std::ptrdiff_t>(rows.begin) * s.batch;
  Gemm g;
  g.m = rows.end - rows.begin, g.n = s.in, g.k = s.batch;
  g.a = my_dyT, g.a_row_stride = s.batch, g.a_col_stride = 1;
  g.b = x, g.ldb = s.in;
  g.c = dw + static_cast<std::ptrdiff_t>(rows.begin) * s.in, g.ldc = s.in;
  if (update != nullptr) {
    g.epilogue.sgd_params = update->w + static_cast<std::ptrdiff_t>(rows.begin) * s.in;
    g.epilogue.sgd_stride = s.in;
    g.epilogue.sgd_lr = update->lr;
    g.epilogue.sgd_weight_decay = update->weight_decay;
  }
  gemm(isa, g);
  row_sums(isa, my_dyT, s.batch, 1, ones, db + rows.begin, rows.end - rows.begin, s.batch);
}

void weight_gradient_from_transposed(Isa isa, const float* xT, const float* dy, const float* ones,
                                     float* scratch, float* dw, float* db, LinearShape s, Part part) {
  // Split by rows of dw^T: a part turns its own rows of the scratch into its own columns of dw.
  const Range rows = share(s.in, part, kRowAlign);
  Gemm g;
  g.m = rows.end - rows.begin, g.n = s.out, g.k = s.batch;
  g.a = xT + static_cast<std::ptrdiff_t>(rows.begin) * s.batch, g.a_row_stride = s.batch, g.a_col_stride = 1;
  g.b = dy, g.ldb = s.out;
  g.c = scratch + static_cast<std::ptrdiff_t>(rows.begin) * s.out, g.ldc = s.out;
  gemm(isa, g);
  for (int k = rows.begin; k < rows.end; ++k)
    for (int o = 0; o < s.out; ++o)
      dw[static_cast<std::ptrdiff_t>(o) * s.in + k] = scratch[static_cast<std::ptrdiff_t>(k) * s.out + o];
  // dy's columns are dyT's rows: the same sums, read down the columns; few enough for one part.
  if (part.index == 0) row_sums(isa, dy, 1, s.out, ones, db, s.out, s.batch);
}

void input_gradient(Isa isa, const float* w, const float* dyT, const float* xT, const float* zT, float* dxT,
                    LinearShape s, Activation act, Part part) {
  const Range rows = share(s.in, part, kRowAlign);
  Gemm g;
  g.m = rows.end - rows.begin, g.n = s.batch, g.k = s.out;
  g.a = w + rows.begin, g.a_row_stride = 1, g.a_col_stride = s.in;  // w^T, read down w's columns
  g.b = dyT, g.ldb = s.batch;
  g.c = dxT + static_cast<std::ptrdiff_t>(rows.begin) * s.batch, g.ldc = s.batch;
  if (act == Activation::relu) {  // relu's derivative from its output, as vectors in the epilogue
    g.epilogue.mask = xT + static_cast<std::ptrdiff_t>(rows.begin) * s.batch;
    g.epilogue.mask_stride = s.batch;
  }
  gemm(isa, g);
  if (in_epilogue(act)) return;
  with_activation(act, [&](auto id) {
    using A = ActivationFn<decltype(id)::value>;
    const float* saved = A::kReadsInput ? zT : xT;
    elementwise(dxT, saved, s.batch, rows, {0, s.batch},
                [](float dx, float v) { return A::backward(dx, v); });
  });
}

}  // namespace mnistdp::cpu
