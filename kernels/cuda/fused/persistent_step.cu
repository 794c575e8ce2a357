// Consecutive training steps in one cooperative launch (contract: kernels/cuda/fused/persistent_step.hpp).
//
// Every block runs every step's three phases, a grid-wide barrier after each, so that each phase sees all
// that the phase before wrote, on every SM:
//
//   1. fc1's forward with the gather: the tiles of gather_linear (as many as its own launch has blocks), a
//      tile at a time by the block's first slab::kThreads threads, which have a named barrier of their own;
//   2. the classifier head: its blocks (head_split::grid_blocks), a block's worth at a time;
//   3. fc1's weight gradient and every parameter's SGD step: the last kernel's items (a column of the weight
//      gradient over 8 of its rows, or another parameter) over all the grid's threads.
//
// The phases' shared memory is one buffer, reused: the tile's in phase 1, the head's logits in phase 2.
// The barriers are cooperative_groups' grid.sync(), which orders memory across the grid; nothing here is
// read through the read-only cache, which a launch does not keep coherent (tests/ptx).
#include <cooperative_groups.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "kernels/cuda/fused/classifier_head_block.cuh"
#include "kernels/cuda/fused/gather_linear_tile.cuh"
#include "kernels/cuda/fused/persistent_step.hpp"
#include "kernels/cuda/fused/weight_gradient_sgd_elements.cuh"
#include "kernels/cuda/ops/loss_watch.cuh"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/launch.cuh"
#include "kernels/cuda/runtime/portable_dialect.cuh"

namespace mnistdp::cuda {
namespace {

constexpr int kThreads = detail::kHeadThreads;
static_assert(kThreads >= detail::slab::kThreads && kThreads % detail::kWarpSize == 0 &&
              detail::slab::kThreads % detail::kWarpSize == 0);
// __syncthreads() is barrier 0.
constexpr int kTileBarrier = 1;

// The most any shape takes: the head's limit, beyond the tile's (classifier_head.cu).
constexpr std::size_t kMaxSharedBytes = 47 * 1024;
static_assert(sizeof(detail::GatherLinearShared) <= kMaxSharedBytes);

std::size_t shared_bytes(int batch, int classes) {
  return std::max(sizeof(detail::GatherLinearShared),
                  static_cast<std::size_t>(detail::classifier_head_shared_bytes(batch, classes)));
}

// The barrier of the threads that run a tile: the first slab::kThreads of the block.
__device__ __forceinline__ void tile_barrier() {
  detail::named_barrier<kTileBarrier, detail::slab::kThreads>();
}

// kAct: the hidden layer's activation (a.forward.activation); kVectorDy: phase 3's loads of dy as vectors
// (weight_gradient_sgd_elements.cuh).
template <Activation kAct, bool kVectorDy>
__global__ void __launch_bounds__(kThreads) persistent_step_kernel(PersistentStepArgs a) {
  // 16-byte aligned, as dynamic shared memory always is: the tile's struct holds a long.
  MNISTDP_DYNAMIC_SHARED(float4, shared);
  auto& tile = *reinterpret_cast<detail::GatherLinearShared*>(shared);
  auto* head_shared = reinterpret_cast<float*>(shared);
  const cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  const int block = static_cast<int>(blockIdx.x);
  const int blocks = static_cast<int>(gridDim.x);
  const int tile_cols = detail::ceil_div(a.forward.out, detail::slab::kTileN);
  const int tiles = tile_cols * detail::ceil_div(a.forward.batch, detail::slab::kTileM);
  const int head_blocks = head_split::grid_blocks(a.head.hidden, a.head.classes);
  // The phase timer: thread 0 of block 0, its SM's clock, read after each barrier.
  const bool timer = a.phase_cycles && block == 0 && threadIdx.x == 0;
  long long mark = timer ? clock64() : 0;
  auto lap = [&](int phase) {
    if (!timer) return;
    const long long now = clock64();
    a.phase_cycles[phase] += now - mark;
    mark = now;
  };

  for (int step = 0; step < a.steps; ++step) {
    if (static_cast<int>(threadIdx.x) < detail::slab::kThreads) {
      detail::fill_pixel_table(tile);  // phase 2 overwrote it
      for (int t = block; t < tiles; t += blocks) {
        detail::gather_linear_tile<kAct>(a.forward, a.first + step * a.stride, t % tile_cols, t / tile_cols,
                                         tile, tile_barrier);
      }
    }
    grid.sync();
    lap(0);
    for (int b = block; b < head_blocks; b += blocks) {
      if (b != block) __syncthreads();  // the block before is done with the shared logits
      detail::classifier_head_block<kAct>(a.head, b, head_shared);
    }
    grid.sync();
    lap(1);
    // Items in warp-wide runs dealt to the blocks in turn, so that the 873 runs of SimpleNet's items reach
    // every SM, not only the first 110 blocks' worth.
    detail::weight_gradient_sgd_items<kVectorDy>(
        a.last,
        weight_items::dealt_first_item(block, blocks, static_cast<int>(threadIdx.x), detail::kWarpSize),
        blocks * kThreads);
    // The loss sum is final since the barrier after phase 2, and the next step's phase 2 writes it only
    // after the barrier below; one thread of the grid moves the record on, step by step.
    if (a.last.watch && block == 0 && threadIdx.x == 0) detail::watch_loss(a.last.watch, *a.last.loss_sum);
    // The last step needs no barrier, except to time its phase as the others are timed.
    if (step + 1 < a.steps || a.phase_cycles) grid.sync();
    lap(2);
  }
}

}  // namespace

bool persistent_step_fits(int batch, int classes) {
  return classifier_head_fits(batch, classes);
}

int persistent_step_max_blocks_per_sm() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  int cooperative = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
  if (!cooperative) return 0;
  // The fewest of the instantiations', so that any may be launched.
  int fewest = std::numeric_limits<int>::max();
  auto count = [&](Activation id) {
    with_activation(id, [&](auto act) {
      constexpr Activation kAct = decltype(act)::value;
      int vector = 0;
      int scalar = 0;
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&vector, persistent_step_kernel<kAct, true>,
                                                               kThreads, kMaxSharedBytes));
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&scalar, persistent_step_kernel<kAct, false>,
                                                               kThreads, kMaxSharedBytes));
      fewest = std::min({fewest, vector, scalar});
    });
  };
  count(Activation::identity);  // with_activation compiles it too
  for (const ActivationRow& row : kActivations)
    count(row.id);
  return fewest;
}

void persistent_steps(const PersistentStepArgs& a, int blocks, cudaStream_t stream) {
  if (a.steps < 0 || a.first < 0 || a.stride < 0)
    throw std::invalid_argument("persistent_steps: negative steps, first row or stride");
  if (blocks < 1) throw std::invalid_argument("persistent_steps: fewer than one block");
  const GatherLinearArgs& f = a.forward;
  const ClassifierHeadArgs& h = a.head;
  const WeightGradientSgdArgs& l = a.last;
  if (h.batch != f.batch || l.batch != f.batch || h.hidden != f.out || l.out != f.out || l.in != f.in ||
      h.h != f.h || h.z != f.z || h.activation != f.activation || h.labels != f.y || l.dy != h.dh ||
      l.x != f.x) {
    throw std::invalid_argument("persistent_steps: the three phases' shapes or buffers disagree");
  }
  if (l.first_step || l.cursor)
    throw std::invalid_argument("persistent_steps: a first step with momentum or a cursor to move");
  if (!persistent_step_fits(f.batch, h.classes))
    throw std::invalid_argument("persistent_steps: the shape's logits do not fit in a block's shared memory");
  const long last_row = a.first + static_cast<long>(std::max(a.steps - 1, 0)) * a.stride + f.batch;
  if (last_row > std::numeric_limits<int>::max())
    throw std::invalid_argument("persistent_steps: rows past the reach of the kernel's 32-bit positions");
  validate(f);
  validate(h);
  validate(l, static_cast<std::size_t>(blocks) * kThreads);
  if (a.steps == 0) return;
  const std::size_t shared = shared_bytes(f.batch, h.classes);
  // A refused launch (more blocks than stay resident, say) throws CudaError.
  const bool vector_dy = detail::vector_dy_loads(l);
  with_activation(f.activation, [&](auto act) {
    constexpr Activation kAct = decltype(act)::value;
    if (vector_dy) {
      detail::launch_cooperative<persistent_step_kernel<kAct, true>>(dim3(static_cast<unsigned>(blocks)),
                                                                     dim3(kThreads), shared, stream, a);
    } else {
      detail::launch_cooperative<persistent_step_kernel<kAct, false>>(dim3(static_cast<unsigned>(blocks)),
                                                                      dim3(kThreads), shared, stream, a);
    }
  });
}

}  // namespace mnistdp::cuda
