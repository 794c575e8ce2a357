#pragma once
// The CPU training path's linear layer, with its activations feature-major: a [features, rows] matrix holds
// one row per feature, its rows' values side by side, so that every product of the layer is a cpu::gemm with
// the weights, kept in PyTorch's [out, in] layout, read as broadcasts (kernels/cpu/gemm.hpp). The notation xT
// says "x, feature-major". Every output is overwritten; rows = 0 is valid (the weight and bias gradients are
// then zeros).
#include "kernels/cpu/gemm.hpp"
#include "kernels/ref/linear.hpp"

namespace mnistdp::cpu {

// One member's share of an operation split among the threads of a team: each member computes its own rows of
// every output and reads only what is complete. Since each element is one sum in a fixed order, the results
// are the same bits however many members share the work.
struct Part {
  int index = 0;
  int count = 1;
};

// [begin, end) of part's share of n items, split in whole multiples of `align` (the last share takes the
// rest).
struct Range {
  int begin, end;
};
Range share(int n, Part part, int align);

// dst[c, r] = src[r, c], for the part's share of the columns c, in square blocks of vectors where the
// instruction set has them.
void transpose(Isa isa,
               const float* src,  // [rows, cols]
               float* dst,        // [cols, rows]
               int rows, int cols, Part part = {});

// yT = act(w xT + b), and zT = w xT + b where zT is not nullptr: ref::linear_forward, feature-major. ReLU is
// applied in the product's epilogue, as vectors; an activation without a vector form (GELU) in a pass over
// the part's rows once its product is done, through the same scalar function as ref::'s.
void linear_forward(Isa isa,
                    const float* w,   // [out, in]
                    const float* b,   // [out]
                    const float* xT,  // [in, batch]
                    float* yT,        // [out, batch]
                    LinearShape s, Activation act,
                    float* zT = nullptr,  // [out, batch] or nullptr
                    Part part = {});

// One step of torch.optim.SGD without momentum, applied to a weight as its gradient is made (cpu::Epilogue's
// sgd_params): the same bits as ref::sgd_step on the stored gradient, without the pass over it.
struct WeightUpdate {
  float* w;  // [out, in], updated in place
  float lr;
  float weight_decay;
};

// Columns of the batch per part where an operation is split that way: whole vectors of the widest
// instruction set, so that two parts never write the same cache line of a [features, batch] row.
constexpr int kBatchAlign = 16;

// As linear_forward, for the part's share of the batch's columns (whole multiples of kBatchAlign) and every
// output row: for a layer too narrow to split by rows (fc2's ten).
void linear_forward_by_columns(Isa isa,
                               const float* w,   // [out, in]
                               const float* b,   // [out]
                               const float* xT,  // [in, batch]
                               float* yT,        // [out, batch]
                               LinearShape s, Activation act,
                               float* zT = nullptr,  // [out, batch] or nullptr
                               Part part = {});

// dw = dy^T x from dy feature-major and x by rows; db = the sums of dy's rows of dyT, each summed in row
// order as ref:: sums it. With an update, dw is applied to update->w instead of stored, and the dw buffer
// only holds partial sums (where the batch is longer than one pass over it) and is left undefined.
void weight_gradient(Isa isa,
                     const float* dyT,   // [out, batch]
                     const float* x,     // [batch, in]
                     const float* ones,  // [batch], every element 1
                     float* dw,          // [out, in]
                     float* db,          // [out]
                     LinearShape s, Part part = {}, const WeightUpdate* update = nullptr);

// Split by rows of dw: a part reads only its own rows of dyT. weight_gradient and input_gradient split their
// [256]-row outputs alike, so the rows of dx one part writes are the rows of dy it reads next.
//
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
                                     LinearShape s, Part part = {});

// dxT = w^T dyT times the derivative of the activation xT = act(zT) came out of, as ref::linear_backward:
// ReLU's zeroes where xT <= 0 in the product's epilogue; an activation that reads its input (GELU) in a pass
// over the part's rows, reading zT.
void input_gradient(Isa isa,
                    const float* w,    // [out, in]
                    const float* dyT,  // [out, batch]
                    const float* xT,   // [in, batch], read where act reads its output
                    const float* zT,   // [in, batch], read where act reads its input, else may be nullptr
                    float* dxT,        // [in, batch]
                    LinearShape s, Activation act, Part part = {});

}  // namespace mnistdp::cpu
