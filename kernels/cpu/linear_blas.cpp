// The CPU training path: the three matrix products of a linear layer go to OpenBLAS's sgemm, and whatever is
// left (bias, activation, its derivative, bias gradient) is done in one pass over the product, while it is
// still in cache.
#include <cblas.h>

#include <algorithm>
#include <cstddef>

#include "kernels/ref/linear.hpp"

namespace mnistdp::blas {

namespace {
std::size_t elems(int rows, int cols) {
  return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
}
}  // namespace

void linear_forward(const float* x,  // [batch, in]
                    const float* w,  // [out, in]
                    const float* b,  // [out]
                    float* y,        // [batch, out]
                    LinearShape s, Activation act,
                    float* z) {            // [batch, out] or nullptr
  if (s.batch == 0 || s.out == 0) return;  // nothing to write; sgemm would reject ldc = 0
  // y = x w^T: CblasTrans reads the [out, in] weight as w^T where it lies, no copy.
  // beta = 0 and then bias in a separate pass measured as fast as pre-filling y with the bias and beta = 1
  // (the pass costs well under 1% of the product), and it keeps y's rounding "product, then + b", as ref::.
  if (s.in == 0) {
    std::fill_n(y, elems(s.batch, s.out), 0.0f);  // an empty sum, without relying on sgemm's k = 0 behaviour
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.batch, s.out, s.in, 1.0f, x, s.in, w, s.in, 0.0f,
                y, s.out);
  }
  with_activation(act, [&](auto id) {
    using A = ActivationFn<decltype(id)::value>;
    for (int i = 0; i < s.batch; ++i) {
      float* row = y + elems(i, s.out);
      float* z_row = z != nullptr ? z + elems(i, s.out) : nullptr;
      for (int o = 0; o < s.out; ++o) {
        const float v = row[o] + b[o];
        if (z_row != nullptr) z_row[o] = v;
        row[o] = A::forward(v);  // the same function as ref::'s
      }
    }
  });
}

void linear_backward(const float* dy,  // [batch, out]
                     const float* x,   // [batch, in]
                     const float* w,   // [out, in]
                     float* dw,        // [out, in]
                     float* db,        // [out]
                     float* dx,        // [batch, in] or nullptr
                     LinearShape s, Activation act,
                     const float* z) {  // [batch, in], read where act reads its input
  if (s.batch == 0) {
    // A replica with no rows still sends gradients: zeros. Said explicitly rather than trusting every BLAS to
    // treat k = 0 with beta = 0 as "overwrite with zeros".
    std::fill_n(dw, elems(s.out, s.in), 0.0f);
    std::fill_n(db, static_cast<std::size_t>(s.out), 0.0f);
    return;
  }
  if (s.out == 0 || s.in == 0) {
    // Degenerate layers: dw is empty; dx = dy w with an empty inner dimension is zero.
    std::fill_n(db, static_cast<std::size_t>(s.out), 0.0f);
    if (dx != nullptr) std::fill_n(dx, elems(s.batch, s.in), 0.0f);
    return;
  }

  // dw = dy^T x: [out, batch] x [batch, in].
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s.out, s.in, s.batch, 1.0f, dy, s.out, x, s.in, 0.0f,
              dw, s.in);

  // db = column sums of dy, row by row so the inner loop runs along memory; each column is still summed from
  // 0 in natural row order, so db agrees with ref:: to the bit.
  std::fill_n(db, static_cast<std::size_t>(s.out), 0.0f);
  for (int i = 0; i < s.batch; ++i) {
    const float* row = dy + elems(i, s.out);
    for (int o = 0; o < s.out; ++o)
      db[o] += row[o];
  }

  if (dx == nullptr) return;
  // dx = dy w: [batch, out] x [out, in].
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.batch, s.in, s.out, 1.0f, dy, s.out, w, s.in, 0.0f,
              dx, s.in);
  with_activation(act, [&](auto id) {
    if constexpr (decltype(id)::value != Activation::identity) {
      using A = ActivationFn<decltype(id)::value>;
      const float* saved = A::kReadsInput ? z : x;
      const std::size_t n = elems(s.batch, s.in);
      for (std::size_t j = 0; j < n; ++j)
        dx[j] = A::backward(dx[j], saved[j]);
    }
  });
}

void set_threads(int threads) {
  openblas_set_num_threads(threads);
}

const char* core_name() {
  return openblas_get_corename();
}

}  // namespace mnistdp::blas
