// Argmax and correct count: one thread per row (rows are 10 classes long), then one CUB block reduction.
// Integers add exactly, so the count does not depend on the order of the reduction.
#include <cub/block/block_reduce.cuh>
#include <stdexcept>

#include "kernels/accuracy_cuda.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_dialect.cuh"
#include "kernels/kernel_launch.cuh"

namespace mnistdp::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    count_correct_kernel(const float* __restrict__ logits,         // [batch, classes]
                         const std::uint8_t* __restrict__ labels,  // [batch]
                         int* __restrict__ correct,                // [1]
                         int batch, int classes) {
  using BlockReduce = cub::BlockReduce<int, kThreads>;
  using Storage = typename BlockReduce::TempStorage;
  MNISTDP_SHARED(Storage, storage);
  int count = 0;
  for (int row = threadIdx.x; row < batch; row += kThreads) {
    const float* __restrict__ z = logits + static_cast<long>(row) * classes;
    int best = 0;
    for (int c = 1; c < classes; ++c) {
      if (z[c] > z[best]) best = c;  // strictly greater: the first maximum wins
    }
    count += best == labels[row] ? 1 : 0;
  }
  const int total = BlockReduce(storage).Sum(count);
  if (threadIdx.x == 0) *correct = total;
}

}  // namespace

void count_correct(const float* logits, const std::uint8_t* labels, int* correct, int batch, int classes,
                   cudaStream_t stream) {
  if (batch < 0 || classes < 1) throw std::invalid_argument("count_correct: bad shape");
  // Launched even for batch 0: the count must still be written (as 0).
  detail::launch<count_correct_kernel>(1, kThreads, 0, stream, logits, labels, correct, batch, classes);
}

}  // namespace mnistdp::cuda
