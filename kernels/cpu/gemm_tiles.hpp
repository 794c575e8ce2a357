#pragma once
// The blocked product behind cpu::gemm (kernels/cpu/gemm.hpp), written once for any vector type. Each
// instruction set's file (kernels/cpu/gemm_avx512.cpp, kernels/cpu/gemm_avx2.cpp,
// kernels/cpu/gemm_portable.cpp) is compiled for its own target and instantiates run<V> with a V that
// provides:
//   T                       the vector type
//   kLanes                  floats in a T
//   kTileVectors            the widest register tile, in vectors of C
//   kAccumulators           the vectors of C a tile keeps in registers (beside one row of B and a broadcast):
//   a
//                           tile of NV vectors has kAccumulators / NV rows, so that narrow column blocks (a
//                           shard of 32 rows, 10 classes) still do many multiply-adds per load
//   zero(), set1(x), load(p), load_part(p, lanes), store(p, v), store_part(p, v, lanes), fmadd(a, b, c) = a b
//   + c, add(a, b), sub(a, b) = a - b, mul(a, b), relu(v), zero_where_not_positive(mask, v)
//
// Everything here is in an anonymous namespace and calls nothing from a library: it is compiled once per
// target, and an inline function with external linkage compiled for AVX-512 could be the copy the linker
// keeps for every caller, older CPUs' included.
#include <cstddef>
#include <utility>
#include <vector>

#include "kernels/cpu/gemm.hpp"

namespace mnistdp::cpu::tiles {
namespace {

// The deepest pass over k, in every instruction set: a column block's B for one pass, 1,024 rows of up to 64
// floats (256 KiB), stays in L2 while every row tile reads down it. Every product of a step (k up to 784) is
// thus one pass: B's rows, read in order, come from L2 as fast as the multiply-adds use them, and slices
// small enough for L1 cost more in the partial sums' round trips through C than they saved (docs/kernels.md).
constexpr int kDeepestPass = 1024;

struct Pass {
  int k0, k1;  // this pass sums over l in [k0, k1)
  bool first;  // C holds nothing yet: start the sums from zero
  bool last;   // the sums are complete: apply the epilogue
};

// Where a row tile finds its elements of A: A[row0 + r, k0 + l] = at[r * row_stride + l * col_stride].
struct ATile {
  const float* at;
  std::ptrdiff_t row_stride, col_stride;
};

// Rows of a tile of NV vectors.
template <class V, int NV>
constexpr int kRows = V::kAccumulators / NV;

// A's k-slice, either read where it lies or packed in panels of P rows, panel after panel, each [l][r] (the
// last panel as high as the rows left), so that a tile of P rows reads its broadcasts from one contiguous run
// of (k1 - k0) P floats. Packing costs one pass over the slice, and pays only where A is read down its
// columns (a_col_stride != 1) by several column blocks: such a [l][row] layout puts a tile's rows for
// successive l a whole row apart, 1 KiB for 256 rows, and the lines of one tile then fall into a few of the
// L1 cache's sets and evict one another. A stored by rows is read where it lies, each of a tile's rows in
// order; packing the weight gradient's (dyT, rows of 64 floats one after another) made that product slower,
// 133 us against 125 on a Xeon with AVX-512.
struct APanel {
  const Gemm& g;
  const Pass& pass;
  const float* packed;  // nullptr: read A where it lies
  int panel_rows;       // P

  // A tile of `rows` rows from row0 reads the packed panel when it is one (row0 on a panel's start, as high
  // as that panel), A where it lies otherwise (the narrow last column block's taller tiles).
  ATile tile(int row0, int rows) const {
    // A pass over no k (k = 0 makes one, for the epilogue) reads nothing of A, which may then be null (an
    // empty batch): no offset is applied to it, as none may be to a null pointer.
    if (pass.k1 == pass.k0) return {g.a, g.a_row_stride, g.a_col_stride};
    const bool is_panel = packed != nullptr && row0 % panel_rows == 0 &&
                          rows == (g.m - row0 < panel_rows ? g.m - row0 : panel_rows);
    if (!is_panel)
      return {g.a + row0 * g.a_row_stride + pass.k0 * g.a_col_stride, g.a_row_stride, g.a_col_stride};
    return {packed + static_cast<std::ptrdiff_t>(row0) * (pass.k1 - pass.k0), 1, rows};
  }
};

inline void pack(const Gemm& g, const Pass& pass, int panel_rows, float* out) {
  for (int row0 = 0; row0 < g.m; row0 += panel_rows) {
    const int rows = g.m - row0 < panel_rows ? g.m - row0 : panel_rows;
    for (int l = pass.k0; l < pass.k1; ++l)
      for (int r = 0; r < rows; ++r)
        *out++ = g.a[(row0 + r) * g.a_row_stride + l * g.a_col_stride];
  }
}

// One tile of C: rows [row0, row0 + R), columns from col0, NV vectors, the last of them `last_lanes` wide
// when Partial.
template <class V, int R, int NV, bool Partial>
inline void tile(const Gemm& g, const Pass& pass, const ATile& a, int row0, int col0, int last_lanes) {
  using T = typename V::T;
  constexpr int L = V::kLanes;
  const auto load = [last_lanes](const float* p, int v) {
    return (Partial && v == NV - 1) ? V::load_part(p, last_lanes) : V::load(p);
  };

  // Each of the tile's options is tested once for the whole tile, not once a vector: a tile of the weight
  // gradient sums over only 64 values of k, and with a branch per vector in its epilogue that product and its
  // SGD step took 137 us against 126.
  T acc[R][NV];
  const auto for_each = [](auto&& f) {
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 32
      for (int v = 0; v < NV; ++v)
        f(r, v);
  };
  const auto at = [&](auto* p, std::ptrdiff_t stride, int r, int v) {
    return p + (row0 + r) * stride + col0 + v * L;
  };
  if (pass.first)
    for_each([&](int r, int v) { acc[r][v] = V::zero(); });
  else
    for_each([&](int r, int v) { acc[r][v] = load(at(g.c, g.ldc, r, v), v); });

#pragma GCC unroll 4
  // Unrolled, so that the loop's own three scalar instructions (beside 24 multiply-adds in the widest tile)
  // take fewer of the ports the multiply-adds need.
  for (int l = pass.k0; l < pass.k1; ++l) {
    const float* b = g.b + l * g.ldb + col0;
    const float* a_l = a.at + (l - pass.k0) * a.col_stride;
    T bv[NV];
#pragma GCC unroll 32
    for (int v = 0; v < NV; ++v)
      bv[v] = load(b + v * L, v);
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) {
      const T ar = V::set1(a_l[r * a.row_stride]);
#pragma GCC unroll 32
      for (int v = 0; v < NV; ++v)
        acc[r][v] = V::fmadd(ar, bv[v], acc[r][v]);
    }
  }

  const auto store = [last_lanes](float* p, T x, int v) {
    if (Partial && v == NV - 1)
      V::store_part(p, x, last_lanes);
    else
      V::store(p, x);
  };
  const Epilogue& e = g.epilogue;
  if (pass.last) {
    if (e.row_bias != nullptr)  // the product, then + b, as ref:: rounds it
      for_each([&](int r, int v) { acc[r][v] = V::add(acc[r][v], V::set1(e.row_bias[row0 + r])); });
    if (e.activation == Activation::relu) for_each([&](int r, int v) { acc[r][v] = V::relu(acc[r][v]); });
    if (e.mask != nullptr)
      for_each([&](int r, int v) {
        acc[r][v] = V::zero_where_not_positive(load(at(e.mask, e.mask_stride, r, v), v), acc[r][v]);
      });
    if (e.sgd_params != nullptr) {  // the parameters are what is stored: ref::sgd_step's p - lr * g
      const T lr = V::set1(e.sgd_lr), weight_decay = V::set1(e.sgd_weight_decay);
      if (e.sgd_weight_decay != 0.0f)
        for_each([&](int r, int v) {
          const T param = load(at(e.sgd_params, e.sgd_stride, r, v), v);
          acc[r][v] = V::add(acc[r][v], V::mul(weight_decay, param));
        });
      for_each([&](int r, int v) {
        float* p = at(e.sgd_params, e.sgd_stride, r, v);
        store(p, V::sub(load(p, v), V::mul(lr, acc[r][v])), v);
      });
      return;
    }
  }
  for_each([&](int r, int v) { store(at(g.c, g.ldc, r, v), acc[r][v], v); });
}

// Every row of C for one column block, kRows rows a tile and the rows left over in one smaller tile.
template <class V, int NV, bool Partial>
inline void column_block(const APanel& a, const Pass& pass, int col0, int last_lanes) {
  constexpr int R = kRows<V, NV>;
  const Gemm& g = a.g;
  int row0 = 0;
  for (; row0 + R <= g.m; row0 += R)
    tile<V, R, NV, Partial>(g, pass, a.tile(row0, R), row0, col0, last_lanes);
  const int rows_left = g.m - row0;
  [&]<int... Rs>(std::integer_sequence<int, Rs...>) {
    ((rows_left == Rs + 1
          ? tile<V, Rs + 1, NV, Partial>(g, pass, a.tile(row0, Rs + 1), row0, col0, last_lanes)
          : void()),
     ...);
  }
  (std::make_integer_sequence<int, R - 1>{});
}

// The last column block, narrower than a full one: NV vectors where NV < kTileVectors, or a partial last one.
template <class V>
inline void last_column_block(const APanel& a, const Pass& pass, int col0) {
  const Gemm& g = a.g;
  constexpr int L = V::kLanes;
  const int columns = g.n - col0;
  const int vectors = (columns + L - 1) / L;
  const int last_lanes = columns - (vectors - 1) * L;
  [&]<int... Vs>(std::integer_sequence<int, Vs...>) {
    ((vectors == Vs + 1 ? (last_lanes == L ? column_block<V, Vs + 1, false>(a, pass, col0, L)
                                           : column_block<V, Vs + 1, true>(a, pass, col0, last_lanes))
                        : void()),
     ...);
  }
  (std::make_integer_sequence<int, V::kTileVectors>{});
}

template <class V>
void run(const Gemm& g) {
  if (g.m <= 0 || g.n <= 0) return;
  constexpr int block_columns = V::kTileVectors * V::kLanes;
  // k-slices outermost, so that a column block's slice of B stays in L2 while every row tile of A streams
  // down it; the partial sums wait in C between slices. The passes are as deep as one another, at most
  // kDeepestPass: a short last pass would pay a whole pass's loads and stores of C for few multiply-adds.
  // k = 0 still makes one pass, which writes the epilogue of zero sums.
  const int passes = g.k > 0 ? (g.k + kDeepestPass - 1) / kDeepestPass : 1;
  const int deepest_pass = g.k > 0 ? (g.k + passes - 1) / passes : 0;
  // Grown to the largest slice a thread has packed, then reused: no allocation in a steady state.
  thread_local std::vector<float> packed;
  const bool pack_a = g.n > block_columns && g.k > 0 && g.a_col_stride != 1;
  const auto pack_size = static_cast<std::size_t>(g.m) * static_cast<std::size_t>(deepest_pass);
  if (pack_a && packed.size() < pack_size) packed.resize(pack_size);
  for (int index = 0; index < passes; ++index) {
    const int k0 = static_cast<int>(static_cast<long long>(g.k) * index / passes);
    const int k1 = static_cast<int>(static_cast<long long>(g.k) * (index + 1) / passes);
    const Pass pass{k0, k1, index == 0, index == passes - 1};
    constexpr int panel_rows = kRows<V, V::kTileVectors>;
    if (pack_a) pack(g, pass, panel_rows, packed.data());
    const APanel a{g, pass, pack_a ? packed.data() : nullptr, panel_rows};
    int col0 = 0;
    for (; col0 + block_columns <= g.n; col0 += block_columns)
      column_block<V, V::kTileVectors, false>(a, pass, col0, V::kLanes);
    if (col0 < g.n) last_column_block<V>(a, pass, col0);
  }
}

}  // namespace
}  // namespace mnistdp::cpu::tiles
