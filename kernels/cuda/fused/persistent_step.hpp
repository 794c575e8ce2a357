#pragma once
// Consecutive training steps in one launch (CudaStepOptions::persistent): the fused step's three kernels
// (host/cuda/fused_kernel_arguments.hpp) become three phases of one cooperative kernel that stays resident for all the
// steps, a grid-wide barrier where a kernel boundary was. Each phase runs the same per-tile, per-block and
// per-element code as its kernel (gather_linear_tile.cuh, classifier_head_block.cuh,
// weight_gradient_sgd_elements.cuh), so the steps give the fused step's results to the bit, and with them
// the plain path's with every hand-written GEMM. What changes is what a step boundary costs: a barrier of
// the grid's blocks instead of the end of a kernel and the start of the next.
#include <cuda_runtime_api.h>

#include "kernels/cuda/fused/classifier_head.hpp"
#include "kernels/cuda/fused/gather_linear.hpp"
#include "kernels/cuda/fused/weight_gradient_sgd.hpp"

namespace mnistdp::cuda {

// The fused step's three kernels' arguments, for `steps` steps of `forward.batch` rows each, step s taking
// the rows at positions [first + s * stride, first + s * stride + forward.batch) of forward.order. The
// shapes must agree (head.batch and last.batch are forward.batch; head.hidden, last.out and forward.out are
// one size; head.h is forward.h, head.labels forward.y, last.dy head.dh, last.x forward.x), and the step's
// buffers must be distinct from one another, as in the fused step. forward.first, last.cursor and
// last.first_step are not used: the rows' positions are given here, and a first step with momentum runs
// the plain way. last.watch, when given, is moved on by every step (loss_watch.hpp).
struct PersistentStepArgs {
  GatherLinearArgs forward;
  ClassifierHeadArgs head;
  WeightGradientSgdArgs last;
  int first = 0;
  int stride = 0;
  int steps = 0;
  // [3] device memory, or nullptr. Where given, the phase timer: thread 0 of block 0 adds to element p the
  // clock cycles of its SM from the start of phase p to the end of the grid-wide barrier after it, every
  // step (the last step then ends with a barrier too). A share of each step per phase, barrier included,
  // for a benchmark; the results are the same either way.
  long long* phase_cycles = nullptr;
};

// Whether one launch can take steps of `batch` rows: the shared memory of the classifier head's phase must
// fit (classifier_head_fits); the first phase's tile always does.
bool persistent_step_fits(int batch, int classes);

// The most blocks per SM the persistent step keeps resident on the current device whatever the shape (the
// shared memory of the largest that fits); 0 where the device cannot launch cooperatively (some virtual GPUs
// and MPS clients, for instance).
int persistent_step_max_blocks_per_sm();

// Launches args.steps steps (none for 0) on `stream` as one cooperative launch of `blocks` blocks: any
// number from 1 (each phase loops over its tiles, head blocks and parameters) to the current device's SMs
// times persistent_step_max_blocks_per_sm (a larger grid is refused by the launch, with CudaError, rather
// than left to wait at its first barrier for blocks that cannot start). Checks every argument as the three
// kernels' launchers do; throws std::invalid_argument for a bad one.
void persistent_steps(const PersistentStepArgs& args, int blocks, cudaStream_t stream);

}  // namespace mnistdp::cuda
