#pragma once
// The CPU training path's linear layer, with its activations feature-major: a [features, rows] matrix holds
// one row per feature, its rows' values side by side, so that every product of the layer is a cpu::gemm with
// the weights, kept in PyTorch's [out, in] layout, read as broadcasts (kernels/cpu_gemm.hpp). The notation xT
// says "x, feature-major". Every output is overwritten; rows = 0 is valid (the weight and bias gradients are
// then zeros).
#include "kernels/cpu_gemm.hpp"
#include "kernels/linear.hpp"

namespace mnistdp::cpu {

// dst[c, r] = src[r, c]
void transpose(const float* src,  // [rows, cols]
               float* dst,        // [cols, rows]
               int rows, int cols);

// yT = w xT + b, clamped at 0 when relu: ref::linear_forward, feature-major.
void linear_forward(Isa isa,
                    const float* w,   // [out, in]
                    const float* b,   // [out]
                    const float* xT,  // [in, batch]
                    float* yT,        // [out, batch]
                    LinearShape s, bool relu);

// dw = dy^T x from dy feature-major and x by rows; db = the sums of dy's rows of dyT, each summed in row
// order as ref:: sums it.
void weight_gradient(Isa isa,
                     const float* dyT,   // [out, batch]
                     const float* x,     // [batch, in]
                     const float* ones,  // [batch], every element 1
                     float* dw,          // [out, in]
                     float* db,          // [out]
                     LinearShape s);

// The same gradients from the other two layouts, for a layer whose input is at hand only feature-major:
// dw^T = xT dy into `scratch`, then transposed into dw. For a narrow layer (out of a vector's width or less)
// this is the cheaper way, as the transpose is of the small [in, out] result, not of x.
void weight_gradient_from_transposed(Isa isa,
                                     const float* xT,    // [in, batch]
                                     const float* dy,    // [batch, out]
                                     const float* ones,  // [batch], every element 1
                                     float* scratch,     // [in, out]
                                     float* dw,          // [out, in]
                                     float* db,          // [out]
                                     LinearShape s);

// dxT = w^T dyT; with relu_mask, zeroed where xT <= 0 (xT is then the ReLU's output, as in ref::).
void input_gradient(Isa isa,
                    const float* w,    // [out, in]
                    const float* dyT,  // [out, batch]
                    const float* xT,   // [in, batch], read only with relu_mask
                    float* dxT,        // [in, batch]
                    LinearShape s, bool relu_mask);

}  // namespace mnistdp::cpu
