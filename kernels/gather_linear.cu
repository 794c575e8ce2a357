// The batch gathered inside the first layer's forward product (contract: gather_linear_cuda.hpp). GEMM v4's
// kernel (gemm_slab.cuh) with its A operand staged from the uint8 pixels of the batch's rows: each block
// normalises the 256 possible pixel values once into a table, with the gather's own normalize_pixel, and
// looks them up as it stages; the blocks of the first column tile also write the staged rows out as x (the
// weight gradient needs them) and the rows' labels as y.
#include <stdexcept>

#include "kernels/cuda_check.hpp"
#include "kernels/gather_linear_cuda.hpp"
#include "kernels/gemm_slab.cuh"
#include "kernels/normalize_pixel.cuh"
#include "kernels/programmatic_launch.cuh"

namespace mnistdp::cuda {
namespace {

using namespace detail::slab;

__global__ void __launch_bounds__(kThreads) gather_linear_kernel(GatherLinearArgs a) {
  __shared__ Slabs s;
  __shared__ float normalised[256];  // [pixel value]
  __shared__ long source[kTileM];    // the data set's row of each of the tile's rows; -1 past the batch
  const int tid = static_cast<int>(threadIdx.x);
  const int row0 = static_cast<int>(blockIdx.y) * kTileM;
  const int col0 = static_cast<int>(blockIdx.x) * kTileN;
  const bool writes_batch = blockIdx.x == 0;

  // The table reads no memory. The fused step launches this kernel the serial way, so the wait returns at
  // once; it is there for a programmatic launch. The classifier head that follows may be scheduled beside it
  // (programmatic_launch.cuh).
  for (int p = tid; p < 256; p += kThreads)
    normalised[p] = detail::normalize_pixel(static_cast<unsigned>(p));
  detail::wait_for_previous_kernel();
  detail::allow_next_kernel();
  if (tid < kTileM) {
    const int r = row0 + tid;
    source[tid] = r < a.batch ? a.order[*a.first + r] : -1;
    if (writes_batch && r < a.batch) a.y[r] = a.labels[source[tid]];
  }
  __syncthreads();

  float acc = 0.0f;
  for (int k0 = 0; k0 < a.in; k0 += kSlabK) {
    const int slab = min(kSlabK, a.in - k0);
    for (int ml = 0; ml < kTileM; ++ml) {  // along the row's pixels, as the gather reads them
      const long src = source[ml];
      const int r = row0 + ml;
      for (int kl = tid; kl < slab; kl += kThreads) {
        const float v = src >= 0 ? normalised[a.images[src * a.in + k0 + kl]] : 0.0f;
        s.a[ml][kl] = v;
        if (writes_batch && src >= 0) a.x[static_cast<long>(r) * a.in + k0 + kl] = v;
      }
    }
    stage_b<true>(s, a.w, a.in, a.out, col0, k0, slab);  // w is [out, in]: op(B) = w^T
    __syncthreads();
    acc = accumulate(s, slab, acc);
    __syncthreads();  // the next slab overwrites these
  }

  const int row = row0 + ty();
  const int col = col0 + tx();
  if (row < a.batch && col < a.out) {
    a.h[static_cast<long>(row) * a.out + col] =
        detail::apply_epilogue(acc, row, col, a.b, /*relu=*/true, /*mask=*/nullptr, a.out);
  }
}

}  // namespace

void gather_linear_forward(const GatherLinearArgs& a, cudaStream_t stream) {
  if (a.batch < 0 || a.in < 0 || a.out < 0)
    throw std::invalid_argument("gather_linear_forward: negative size");
  if (a.out == 0) throw std::invalid_argument("gather_linear_forward: a layer with no outputs");
  if (a.batch == 0) return;
  if (!a.images || !a.labels || !a.order || !a.first || !a.b || !a.x || !a.y || !a.h || (a.in > 0 && !a.w))
    throw std::invalid_argument("gather_linear_forward: null pointer");
  const dim3 grid(detail::ceil_div(a.out, kTileN), detail::ceil_div(a.batch, kTileM));
  gather_linear_kernel<<<grid, kThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace mnistdp::cuda
