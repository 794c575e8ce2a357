// The definition of the linear layer: plain loops, one output element at a time, each sum accumulated in
// float in the natural order of its index. Every faster implementation is checked against this file.
#include <cstddef>

#include "kernels/ref/linear.hpp"

namespace mnistdp::ref {

namespace {
// Row-major index; size_t so that batch * in never overflows int.
inline std::size_t at(int row, int col, int cols) {
  return static_cast<std::size_t>(row) * static_cast<std::size_t>(cols) + static_cast<std::size_t>(col);
}
}  // namespace

void linear_forward(const float* x,  // [batch, in]
                    const float* w,  // [out, in]
                    const float* b,  // [out]
                    float* y,        // [batch, out]
                    LinearShape s, bool relu) {
  for (int i = 0; i < s.batch; ++i) {
    for (int o = 0; o < s.out; ++o) {
      float acc = 0.0f;
      for (int k = 0; k < s.in; ++k)
        acc += x[at(i, k, s.in)] * w[at(o, k, s.in)];
      float v = acc + b[o];
      if (relu && v < 0.0f) v = 0.0f;  // < rather than max(): a NaN passes through, as in torch.relu
      y[at(i, o, s.out)] = v;
    }
  }
}

void linear_backward(const float* dy,  // [batch, out]
                     const float* x,   // [batch, in]
                     const float* w,   // [out, in]
                     float* dw,        // [out, in]
                     float* db,        // [out]
                     float* dx,        // [batch, in] or nullptr
                     LinearShape s, bool relu_mask) {
  // dw = dy^T x: with batch 0 the empty sums leave zeros, which is what a replica with no rows must send.
  for (int o = 0; o < s.out; ++o) {
    for (int k = 0; k < s.in; ++k) {
      float acc = 0.0f;
      for (int i = 0; i < s.batch; ++i)
        acc += dy[at(i, o, s.out)] * x[at(i, k, s.in)];
      dw[at(o, k, s.in)] = acc;
    }
  }
  for (int o = 0; o < s.out; ++o) {
    float acc = 0.0f;
    for (int i = 0; i < s.batch; ++i)
      acc += dy[at(i, o, s.out)];
    db[o] = acc;
  }
  if (dx == nullptr) return;
  // dx = dy w; with relu_mask, x is the ReLU's output, and x > 0 exactly where the ReLU passed its input
  // (PyTorch's threshold_backward zeroes the gradient where the output is <= 0, the same test).
  for (int i = 0; i < s.batch; ++i) {
    for (int k = 0; k < s.in; ++k) {
      float acc = 0.0f;
      for (int o = 0; o < s.out; ++o)
        acc += dy[at(i, o, s.out)] * w[at(o, k, s.in)];
      if (relu_mask && x[at(i, k, s.in)] <= 0.0f) acc = 0.0f;
      dx[at(i, k, s.in)] = acc;
    }
  }
}

}  // namespace mnistdp::ref
