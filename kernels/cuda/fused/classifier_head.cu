// The fused classifier head (contract: kernels/cuda/fused/classifier_head.hpp): one launch of
// head_split::grid_blocks blocks, each block's work in classifier_head_block.cuh.
#include <stdexcept>
#include <string>

#include "kernels/cuda/fused/classifier_head.hpp"
#include "kernels/cuda/fused/classifier_head_block.cuh"
#include "kernels/cuda/fused/classifier_head_split.hpp"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/portable_dialect.cuh"
#include "kernels/cuda/runtime/programmatic_launch.cuh"

namespace mnistdp::cuda {
namespace {

using detail::kHeadThreads;
// A block gets 48 KiB without opting in to more; the static warp_losses take a few bytes of it.
constexpr long kMaxSharedBytes = 47 * 1024;

template <Activation kAct>
__global__ void __launch_bounds__(kHeadThreads) classifier_head_kernel(ClassifierHeadArgs a) {
  MNISTDP_DYNAMIC_SHARED(float, shared);
  detail::wait_for_previous_kernel();  // h (and in the fused step y) come from the kernel before
  detail::allow_next_kernel();
  detail::classifier_head_block<kAct>(a, static_cast<int>(blockIdx.x), shared);
}

}  // namespace

int classifier_head_max_rows(int classes) {
  if (classes < 1) throw std::invalid_argument("classifier_head_max_rows: no classes");
  return static_cast<int>(kMaxSharedBytes / detail::classifier_head_shared_bytes(1, classes));
}

bool classifier_head_fits(int batch, int classes) {
  return batch >= 0 && classes >= 1 && batch <= classifier_head_max_rows(classes);
}

void validate(const ClassifierHeadArgs& a) {
  if (a.batch < 0 || a.hidden < 1 || a.classes < 1) throw std::invalid_argument("classifier_head: bad shape");
  if (!classifier_head_fits(a.batch, a.classes)) {
    throw std::invalid_argument("classifier_head: " + std::to_string(a.batch) + " rows of " +
                                std::to_string(a.classes) +
                                " classes do not fit in one block's shared memory");
  }
  // The per-row buffers are not touched without rows (and an empty device buffer has no address).
  const bool rows_given = a.batch == 0 || (a.h && a.labels && a.logits && a.dlogits && a.dh &&
                                           (a.z || !keeps_pre_activation(a.activation)));
  if (!rows_given || !a.w || !a.b || !a.loss_sum || !a.dw || !a.db || !a.dh_sums)
    throw std::invalid_argument("classifier_head: null pointer");
}

void classifier_head(const ClassifierHeadArgs& a, cudaStream_t stream, LaunchOrder order) {
  validate(a);
  const auto shared = static_cast<std::size_t>(detail::classifier_head_shared_bytes(a.batch, a.classes));
  with_activation(a.activation, [&](auto act) {
    detail::launch_in_order<classifier_head_kernel<decltype(act)::value>>(
        dim3(static_cast<unsigned>(head_split::grid_blocks(a.hidden, a.classes))), dim3(kHeadThreads), shared,
        stream, order, a);
  });
}

}  // namespace mnistdp::cuda
