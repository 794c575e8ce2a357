// The CUDA path's Thrust calls (kernels/cuda/thrust/thrust_ops.cuh), ordered on a replica's stream like its
// kernels.
//
// On a GPU: the CUDA system's algorithms with the stream's own policy. Work that returns nothing runs with
// par_nosync, which queues it and returns without waiting; a reduction returns its value to the host and so
// waits, with par. Temporaries come from the caller's ThrustScratch, so that no call after the first
// allocates, and none frees (cudaFree would wait for the whole device).
//
// Under emulation Thrust's CUDA system cannot run, and its headers cannot meet the emulated dialect's, so
// the same algorithms run on Thrust's host system (kernels/cuda/thrust/host_system.cpp), queued on the stream
// as a host function: they run when the stream reaches them, after the kernels queued before and before those
// after, as on a GPU. A reduction waits for the stream first, as par does. Their temporaries come from the
// same ThrustScratch, when the stream reaches them rather than at the call. Being device work, they open
// device memory to the host's threads while they run (emu::DeviceWork), as no other host code may.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/thrust/accuracy.hpp"
#include "kernels/cuda/thrust/epoch_order.hpp"
#include "kernels/cuda/thrust/scratch.hpp"

#if defined(MNISTDP_CUDA_EMULATED)
#include "emu/device_work.hpp"
#include "kernels/cuda/thrust/host_system.hpp"
#else
#include <thrust/system/cuda/execution_policy.h>

#include "kernels/cuda/thrust/thrust_ops.cuh"
#endif

namespace mnistdp::cuda {
namespace {

#if defined(MNISTDP_CUDA_EMULATED)
// ThrustScratch as the host system's source of temporaries.
class ScratchTemporaries final : public thrust_host::Temporaries {
 public:
  explicit ScratchTemporaries(ThrustScratch& scratch) : scratch_(&scratch) {}
  char* allocate(std::ptrdiff_t bytes) override { return scratch_->allocate(bytes); }
  void deallocate(char* block, std::size_t bytes) noexcept override { scratch_->deallocate(block, bytes); }

 private:
  ThrustScratch* scratch_;
};

// `work` runs on the host when the stream reaches it. A host function must not throw (a GPU's runtime calls
// it from a thread of its own); what `work` throws (ThrustScratch failing to allocate, which a GPU's Thrust
// would have thrown at the call) ends the process with its message, rather than pass unseen.
template <typename Work>
void queue_on(cudaStream_t stream, Work work) {
  auto owned = std::make_unique<Work>(std::move(work));
  CUDA_CHECK(cudaLaunchHostFunc(
      stream,
      [](void* w) {
        try {
          const emu::DeviceWork device_work;
          std::unique_ptr<Work>(static_cast<Work*>(w))->operator()();
        } catch (const std::exception& e) {
          std::fprintf(stderr, "emulated Thrust, queued on a stream: %s\n", e.what());
          std::abort();
        }
      },
      owned.get()));
  static_cast<void>(owned.release());  // the host function owns it now
}
#else
auto queued(ThrustScratch& scratch, cudaStream_t stream) {
  return thrust::cuda::par_nosync(scratch).on(stream);
}
auto waited(ThrustScratch& scratch, cudaStream_t stream) {
  return thrust::cuda::par(scratch).on(stream);
}
#endif

void check_count(int count, const char* what) {
  if (count < 0) throw std::invalid_argument(std::string(what) + ": negative count");
}

}  // namespace

void epoch_order(std::int32_t* order, std::uint64_t* keys, int count, std::uint64_t shuffle_seed,
                 ThrustScratch& scratch, cudaStream_t stream) {
  check_count(count, "epoch_order");
  if (count == 0) return;
#if defined(MNISTDP_CUDA_EMULATED)
  queue_on(stream, [=, &scratch] {
    ScratchTemporaries temporaries(scratch);
    thrust_host::epoch_order(temporaries, order, keys, count, shuffle_seed);
  });
#else
  thrust_ops::epoch_order(queued(scratch, stream), order, keys, count, shuffle_seed);
  CUDA_CHECK(cudaGetLastError());
#endif
}

void mark_correct(const float* logits, const std::uint8_t* labels, std::uint8_t* correct, int rows,
                  int classes, ThrustScratch& scratch, cudaStream_t stream) {
  check_count(rows, "mark_correct");
  if (classes < 1) throw std::invalid_argument("mark_correct: no classes");
  if (rows == 0) return;
#if defined(MNISTDP_CUDA_EMULATED)
  queue_on(stream, [=, &scratch] {
    ScratchTemporaries temporaries(scratch);
    thrust_host::mark_correct(temporaries, logits, labels, correct, rows, classes);
  });
#else
  thrust_ops::mark_correct(queued(scratch, stream), logits, labels, correct, rows, classes);
  CUDA_CHECK(cudaGetLastError());
#endif
}

long long count_marked(const std::uint8_t* marks, int count, ThrustScratch& scratch, cudaStream_t stream) {
  check_count(count, "count_marked");
#if defined(MNISTDP_CUDA_EMULATED)
  CUDA_CHECK(cudaStreamSynchronize(stream));
  ScratchTemporaries temporaries(scratch);
  const emu::DeviceWork device_work;
  return count == 0 ? 0 : thrust_host::count_marked(temporaries, marks, count);
#else
  if (count == 0) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return 0;
  }
  return thrust_ops::count_marked(waited(scratch, stream), marks, count);
#endif
}

double sum_in_double(const float* values, int count, ThrustScratch& scratch, cudaStream_t stream) {
  check_count(count, "sum_in_double");
#if defined(MNISTDP_CUDA_EMULATED)
  CUDA_CHECK(cudaStreamSynchronize(stream));
  ScratchTemporaries temporaries(scratch);
  const emu::DeviceWork device_work;
  return count == 0 ? 0.0 : thrust_host::sum_in_double(temporaries, values, count);
#else
  if (count == 0) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return 0.0;
  }
  return thrust_ops::sum_in_double(waited(scratch, stream), values, count);
#endif
}

}  // namespace mnistdp::cuda
