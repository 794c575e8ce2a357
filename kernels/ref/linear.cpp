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
                    LinearShape s, Activation act,
                    float* z) {  // [batch, out] or nullptr
  with_activation(act, [&](auto id) {
    using A = ActivationFn<decltype(id)::value>;
    for (int i = 0; i < s.batch; ++i) {
      for (int o = 0; o < s.out; ++o) {
        float acc = 0.0f;
        for (int k = 0; k < s.in; ++k)
          acc += x[at(i, k, s.in)] * w[at(o, k, s.in)];
        const float v = acc + b[o];
        if (z != nullptr) z[at(i, o, s.out)] = v;
        y[at(i, o, s.out)] = A::forward(v);
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
  // dx = dy w, times the derivative of the activation x came out of, read from x itself or from z.
  with_activation(act, [&](auto id) {
    using A = ActivationFn<decltype(id)::value>;
    const float* saved = A::kReadsInput ? z : x;
    for (int i = 0; i < s.batch; ++i) {
      for (int k = 0; k < s.in; ++k) {
        float acc = 0.0f;
        for (int o = 0; o < s.out; ++o)
          acc += dy[at(i, o, s.out)] * w[at(o, k, s.in)];
        dx[at(i, k, s.in)] = A::backward(acc, saved[at(i, k, s.in)]);
      }
    }
  });
}

}  // namespace mnistdp::ref
