// The batch gathered inside the first layer's forward product (contract:
// kernels/cuda/fused/gather_linear.hpp): one block a tile, the tile's work in gather_linear_tile.cuh.
#include <stdexcept>

#include "kernels/cuda/fused/gather_linear_tile.cuh"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/portable_dialect.cuh"
#include "kernels/cuda/runtime/programmatic_launch.cuh"

namespace mnistdp::cuda {
namespace {

template <Activation kAct>
__global__ void __launch_bounds__(detail::slab::kThreads) gather_linear_kernel(GatherLinearArgs a) {
  MNISTDP_SHARED(detail::GatherLinearShared, s);
  // The table reads no memory. The fused step launches this kernel the serial way, so the wait returns at
  // once; it is there for a programmatic launch. The classifier head that follows may be scheduled beside it
  // (programmatic_launch.cuh).
  detail::fill_pixel_table(s);
  detail::wait_for_previous_kernel();
  detail::allow_next_kernel();
  detail::gather_linear_tile<kAct>(a, *a.first, static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), s,
                                   [] { __syncthreads(); });
}

}  // namespace

void validate(const GatherLinearArgs& a) {
  if (a.batch < 0 || a.in < 0 || a.out < 0)
    throw std::invalid_argument("gather_linear_forward: negative size");
  if (a.out == 0) throw std::invalid_argument("gather_linear_forward: a layer with no outputs");
  if (a.batch > 0 && (!a.images || !a.labels || !a.order || !a.b || !a.x || !a.y || !a.h ||
                      (a.in > 0 && !a.w) || (keeps_pre_activation(a.activation) && !a.z)))
    throw std::invalid_argument("gather_linear_forward: null pointer");
}

void gather_linear_forward(const GatherLinearArgs& a, cudaStream_t stream) {
  validate(a);
  if (a.batch == 0) return;
  if (!a.first) throw std::invalid_argument("gather_linear_forward: null pointer");
  const dim3 grid(detail::ceil_div(a.out, detail::slab::kTileN),
                  detail::ceil_div(a.batch, detail::slab::kTileM));
  with_activation(a.activation, [&](auto act) {
    detail::launch<gather_linear_kernel<decltype(act)::value>>(grid, detail::slab::kThreads, 0, stream, a);
  });
}

}  // namespace mnistdp::cuda
