// Deliberately racy kernels and host sequences for the emulated build under ThreadSanitizer (preset emu-tsan,
// docs/emulation.md, "The sanitizer builds"): `mnistdp_emu_race_probe CASE` runs one and exits 0. The
// sanitizer decides the outcome: ctest passes a racy case only when ThreadSanitizer reports the race and
// names the kernel, and its synchronised twin ("-synchronised") only when nothing is reported, so that a
// check that reported everything would fail too.
#include <cooperative_groups.h>

#include <stdexcept>
#include <vector>

#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/graph.hpp"
#include "kernels/cuda/runtime/launch.cuh"
#include "kernels/cuda/runtime/memory.hpp"
#include "kernels/cuda/runtime/portable_dialect.cuh"
#include "kernels/cuda/runtime/programmatic_launch.cuh"
#include "tests/emu/probe_main.hpp"

namespace mnistdp::emu_probe {
namespace {

constexpr int kThreads = 64;

// Each thread writes its slot of a shared array and reads its neighbour's: without the barrier, the read
// races with the neighbour's write.
template <bool kBarrier>
__global__ void neighbour_in_shared_kernel(float* __restrict__ out) {  // [kThreads]
  using Row = float[kThreads];
  MNISTDP_SHARED(Row, row);
  const int i = static_cast<int>(threadIdx.x);
  row[i] = static_cast<float>(i);
  if (kBarrier) __syncthreads();
  out[i] = row[(i + 1) % kThreads];
}

// Each lane writes its slot of a warp's shared array, exchanges a value with a shuffle, and reads its
// neighbour's slot. A shuffle exchanges registers and orders no memory (the programming guide promises
// memory ordering of __syncwarp() alone): without __syncwarp() the read races with the neighbour's write.
template <bool kSyncWarp>
__global__ void neighbour_after_shuffle_kernel(float* __restrict__ out) {  // [32]
  using Row = float[32];
  MNISTDP_SHARED(Row, row);
  const int lane = static_cast<int>(threadIdx.x);
  row[lane] = static_cast<float>(lane);
  const float partner = __shfl_xor_sync(0xffffffffu, static_cast<float>(lane), 1);
  if (kSyncWarp) __syncwarp();
  out[lane] = row[(lane + 1) % 32] + partner;
}

// Block 0 writes, block 1 reads what block 0 wrote: without grid.sync() the blocks race.
template <bool kGridSync>
__global__ void across_blocks_kernel(float* __restrict__ buffer,  // [kThreads]
                                     float* __restrict__ out) {   // [kThreads]
  const int i = static_cast<int>(threadIdx.x);
  if (blockIdx.x == 0) buffer[i] = static_cast<float>(i);
  if (kGridSync) cooperative_groups::this_grid().sync();
  if (blockIdx.x == 1) out[i] = buffer[i];
}

constexpr int kBlocks = 64;

// Every block writes its own slice of `out`, but with kOverlap the last block writes the first's: the two
// blocks race, however many threads ran between them.
template <bool kOverlap>
__global__ void slices_kernel(float* __restrict__ out) {  // [kBlocks * kThreads]
  const unsigned slice = kOverlap && blockIdx.x == kBlocks - 1 ? 0 : blockIdx.x;
  out[slice * kThreads + threadIdx.x] = static_cast<float>(blockIdx.x);
}

// Block 0's threads write data and its thread 0 then sets a flag; block 1's thread 0 waits for the flag and
// its threads then read the data. The atomics are relaxed, as CUDA's are: only a __threadfence() between the
// writes and the flag, and another between the flag and the reads, make block 1 see the data (the PTX ISA's
// memory model: a release pattern and an acquire pattern); without either an H200 may serve the reads stale.
template <bool kWriterFence, bool kReaderFence>
__global__ void flag_kernel(float* __restrict__ data,   // [kThreads]
                            int* flag,                  // [1], 0 at the launch
                            float* __restrict__ out) {  // [kThreads]
  const int i = static_cast<int>(threadIdx.x);
  if (blockIdx.x == 0) {
    data[i] = static_cast<float>(i) + 1.0f;
    if (kWriterFence) __threadfence();
    __syncthreads();
    if (i == 0) atomicAdd(flag, 1);
  } else {
    if (i == 0) {
      while (atomicAdd(flag, 0) == 0) {
      }
      if (kReaderFence) __threadfence();
    }
    __syncthreads();
    out[i] = data[i];
  }
}

// Blocks of 1024 threads, which pass a barrier before they write: ThreadSanitizer's runtime then orders each
// block after the ones before it (docs/emulation.md, "How far back it sees"), so only the check of races
// between blocks reports the overlap.
constexpr int kLargeThreads = 1024;
constexpr int kLargeBlocks = 4;

template <bool kOverlap>
__global__ void large_slices_kernel(float* __restrict__ out) {  // [kLargeBlocks * kLargeThreads]
  __syncthreads();
  const unsigned slice = kOverlap && blockIdx.x == kLargeBlocks - 1 ? 0 : blockIdx.x;
  out[slice * kLargeThreads + threadIdx.x] = static_cast<float>(blockIdx.x);
}

// Block 0 writes, block 1 reads what block 0 wrote, after a barrier of their own: without grid.sync() the
// blocks race.
template <bool kGridSync>
__global__ void large_across_blocks_kernel(float* __restrict__ buffer,  // [kLargeThreads]
                                           float* __restrict__ out) {   // [kLargeThreads]
  const int i = static_cast<int>(threadIdx.x);
  __syncthreads();
  if (blockIdx.x == 0) buffer[i] = static_cast<float>(i);
  if (kGridSync) cooperative_groups::this_grid().sync();
  __syncthreads();
  if (blockIdx.x == 1) out[i] = buffer[i];
}

// A kernel on one stream fills a buffer and a kernel on another copies it, in blocks of 1024 threads that
// pass a barrier first: ThreadSanitizer's runtime may then order the two kernels, so only the check of races
// between operations reports a missing wait.
__global__ void large_fill_kernel(float* __restrict__ p,  // [kLargeThreads]
                                  float value) {
  __syncthreads();
  p[threadIdx.x] = value;
}

__global__ void large_copy_kernel(const float* __restrict__ src,  // [kLargeThreads]
                                  float* __restrict__ dst) {      // [kLargeThreads]
  __syncthreads();
  dst[threadIdx.x] = src[threadIdx.x];
}

// The same pair as a programmatic launch: the primary fills and triggers, the dependent reads before its wait
// (a race) or after it.
__global__ void large_fill_then_trigger_kernel(float* __restrict__ p,  // [kLargeThreads]
                                               float value) {
  __syncthreads();
  p[threadIdx.x] = value;
  cuda::detail::allow_next_kernel();
}

template <bool kReadFirst>
__global__ void large_dependent_copy_kernel(const float* __restrict__ src,  // [kLargeThreads]
                                            float* __restrict__ dst) {      // [kLargeThreads]
  __syncthreads();
  float value = 0.0f;
  if (kReadFirst) value = src[threadIdx.x];
  cuda::detail::wait_for_previous_kernel();
  if (!kReadFirst) value = src[threadIdx.x];
  dst[threadIdx.x] = value;
}

__global__ void fill_kernel(float* __restrict__ p,  // [kThreads]
                            float value) {
  p[threadIdx.x] = value;
}

__global__ void copy_kernel(const float* __restrict__ src,  // [kThreads]
                            float* __restrict__ dst) {      // [kThreads]
  dst[threadIdx.x] = src[threadIdx.x];
}

// The primary of a programmatic launch: writes, then lets the next kernel start.
__global__ void fill_then_trigger_kernel(float* __restrict__ p,  // [kThreads]
                                         float value) {
  p[threadIdx.x] = value;
  cuda::detail::allow_next_kernel();
}

// A primary that lets the next kernel start before it writes: only its own writes, after the dependent's
// reads before its wait, can find the race.
__global__ void trigger_then_fill_kernel(float* __restrict__ p,  // [kThreads]
                                         float value) {
  cuda::detail::allow_next_kernel();
  p[threadIdx.x] = value;
}

// The dependent: reads the primary's output before its wait (a race) or after it.
template <bool kReadFirst>
__global__ void dependent_copy_kernel(const float* __restrict__ src,  // [kThreads]
                                      float* __restrict__ dst) {      // [kThreads]
  float value = 0.0f;
  if (kReadFirst) value = src[threadIdx.x];
  cuda::detail::wait_for_previous_kernel();
  if (!kReadFirst) value = src[threadIdx.x];
  dst[threadIdx.x] = value;
}

template <bool kSynchronised>
void shared_memory() {
  DeviceBuffer<float> out(kThreads);
  cuda::detail::launch<neighbour_in_shared_kernel<kSynchronised>>(1, kThreads, 0, nullptr, out.data());
  CUDA_CHECK(cudaDeviceSynchronize());
}

template <bool kSynchronised>
void cooperative_blocks() {
  DeviceBuffer<float> buffer(kThreads), out(kThreads);
  cuda::detail::launch_cooperative<across_blocks_kernel<kSynchronised>>(2, kThreads, 0, nullptr,
                                                                        buffer.data(), out.data());
  CUDA_CHECK(cudaDeviceSynchronize());
}

template <bool kSynchronised>
void shared_memory_across_a_shuffle() {
  DeviceBuffer<float> out(32);
  cuda::detail::launch<neighbour_after_shuffle_kernel<kSynchronised>>(1, 32, 0, nullptr, out.data());
  CUDA_CHECK(cudaDeviceSynchronize());
}

// The blocks of a cooperative launch are resident at once, so block 1 may wait for block 0.
template <bool kWriterFence, bool kReaderFence>
void flag_between_blocks() {
  DeviceBuffer<float> data(kThreads), out(kThreads);
  DeviceBuffer<int> flag(1);
  CUDA_CHECK(cudaMemset(flag.data(), 0, sizeof(int)));
  CUDA_CHECK(cudaDeviceSynchronize());
  cuda::detail::launch_cooperative<flag_kernel<kWriterFence, kReaderFence>>(
      2, kThreads, 0, nullptr, data.data(), flag.data(), out.data());
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> host(kThreads);
  CUDA_CHECK(cudaMemcpy(host.data(), out.data(), kThreads * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kThreads; ++i)
    if (host[static_cast<std::size_t>(i)] != static_cast<float>(i) + 1.0f)
      throw std::runtime_error("stale data");
}

template <bool kSynchronised>
void blocks_far_apart() {
  DeviceBuffer<float> out(kBlocks * kThreads);
  CUDA_CHECK(cudaDeviceSynchronize());
  cuda::detail::launch<slices_kernel<!kSynchronised>>(kBlocks, kThreads, 0, nullptr, out.data());
  CUDA_CHECK(cudaDeviceSynchronize());
}

template <bool kSynchronised>
void large_blocks() {
  DeviceBuffer<float> out(kLargeBlocks * kLargeThreads);
  CUDA_CHECK(cudaDeviceSynchronize());
  cuda::detail::launch<large_slices_kernel<!kSynchronised>>(kLargeBlocks, kLargeThreads, 0, nullptr,
                                                            out.data());
  CUDA_CHECK(cudaDeviceSynchronize());
}

template <bool kSynchronised>
void large_cooperative_blocks() {
  DeviceBuffer<float> buffer(kLargeThreads), out(kLargeThreads);
  CUDA_CHECK(cudaDeviceSynchronize());
  cuda::detail::launch_cooperative<large_across_blocks_kernel<kSynchronised>>(2, kLargeThreads, 0, nullptr,
                                                                              buffer.data(), out.data());
  CUDA_CHECK(cudaDeviceSynchronize());
}

// A kernel of one block of `threads` fills a buffer on one stream, and `use(stream, buffer, out)` reads it on
// another, after an event or not.
template <bool kSynchronised, auto kFill, class Use>
void filled_on_one_stream_used_on_another(int threads, Use use) {
  DeviceBuffer<float> buffer(threads), out(threads);
  CUDA_CHECK(cudaDeviceSynchronize());  // the allocations' initialisation, before either stream
  const Stream producer, consumer;
  const Event filled;
  cuda::detail::launch<kFill>(1, threads, 0, producer.get(), buffer.data(), 1.0f);
  if (kSynchronised) {
    CUDA_CHECK(cudaEventRecord(filled.get(), producer.get()));
    CUDA_CHECK(cudaStreamWaitEvent(consumer.get(), filled.get(), 0));
  }
  use(consumer.get(), buffer.data(), out.data());
  CUDA_CHECK(cudaDeviceSynchronize());
}

// A kernel on one stream fills a buffer; a kernel on another copies it.
template <bool kSynchronised>
void two_streams() {
  filled_on_one_stream_used_on_another<kSynchronised, fill_kernel>(
      kThreads, [](cudaStream_t stream, float* buffer, float* out) {
        cuda::detail::launch<copy_kernel>(1, kThreads, 0, stream, buffer, out);
      });
}

// Events recorded on two streams that nothing orders: the records are the emulator's bookkeeping (a counter,
// a timestamp), which the program cannot see, so there is nothing to report.
void events_on_unordered_streams() {
  const Stream first, second;
  const Event a, b;
  for (int i = 0; i < 4; ++i) {
    CUDA_CHECK(cudaEventRecord(a.get(), first.get()));
    CUDA_CHECK(cudaEventRecord(b.get(), second.get()));
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a.get(), b.get()));
}

// A kernel of one block of `threads` fills a buffer and lets the next kernel start, which copies the buffer
// before or after its programmatic wait.
template <auto kPrimary, auto kDependent>
void programmatic_pair(int threads) {
  DeviceBuffer<float> buffer(threads), out(threads);
  const Stream stream;
  CUDA_CHECK(cudaDeviceSynchronize());
  cuda::detail::launch<kPrimary>(1, threads, 0, stream.get(), buffer.data(), 1.0f);
  cuda::detail::launch_in_order<kDependent>(1, threads, 0, stream.get(), cuda::LaunchOrder::programmatic,
                                            buffer.data(), out.data());
  CUDA_CHECK(cudaStreamSynchronize(stream.get()));
}

template <bool kSynchronised>
void programmatic_wait() {
  programmatic_pair<fill_then_trigger_kernel, dependent_copy_kernel<!kSynchronised>>(kThreads);
}

// A primary that triggers before its writes, and a dependent that reads before its wait.
void read_before_wait_of_writes_after_trigger() {
  programmatic_pair<trigger_then_fill_kernel, dependent_copy_kernel<true>>(kThreads);
}

// The same pair captured in a graph, whose replay keeps the programmatic edge.
template <bool kSynchronised>
void programmatic_wait_in_graph() {
  DeviceBuffer<float> buffer(kThreads), out(kThreads);
  const Stream stream;
  CUDA_CHECK(cudaDeviceSynchronize());
  const CudaGraphExec graph(capture_graph(stream.get(), [&] {
    cuda::detail::launch<fill_then_trigger_kernel>(1, kThreads, 0, stream.get(), buffer.data(), 1.0f);
    cuda::detail::launch_in_order<dependent_copy_kernel<!kSynchronised>>(
        1, kThreads, 0, stream.get(), cuda::LaunchOrder::programmatic, buffer.data(), out.data());
  }));
  graph.launch(stream.get());
  CUDA_CHECK(cudaStreamSynchronize(stream.get()));
}

template <bool kSynchronised>
void large_blocks_on_two_streams() {
  filled_on_one_stream_used_on_another<kSynchronised, large_fill_kernel>(
      kLargeThreads, [](cudaStream_t stream, float* buffer, float* out) {
        cuda::detail::launch<large_copy_kernel>(1, kLargeThreads, 0, stream, buffer, out);
      });
}

// A kernel on one stream fills a buffer, and a copy on another stream reads it.
template <bool kSynchronised>
void copy_on_another_stream() {
  filled_on_one_stream_used_on_another<kSynchronised, large_fill_kernel>(
      kLargeThreads, [](cudaStream_t stream, float* buffer, float* out) {
        CUDA_CHECK(
            cudaMemcpyAsync(out, buffer, kLargeThreads * sizeof(float), cudaMemcpyDeviceToDevice, stream));
      });
}

template <bool kSynchronised>
void large_blocks_programmatic_wait() {
  programmatic_pair<large_fill_then_trigger_kernel, large_dependent_copy_kernel<!kSynchronised>>(
      kLargeThreads);
}

constexpr Case kCases[] = {
    {"shared-memory-without-barrier", shared_memory<false>},
    {"shared-memory-synchronised", shared_memory<true>},
    {"shared-memory-across-lanes-with-only-a-shuffle", shared_memory_across_a_shuffle<false>},
    {"shared-memory-across-lanes-synchronised-by-syncwarp", shared_memory_across_a_shuffle<true>},
    {"flag-between-blocks-without-fences", flag_between_blocks<false, false>},
    {"flag-between-blocks-without-the-writers-fence", flag_between_blocks<false, true>},
    {"flag-between-blocks-without-the-readers-fence", flag_between_blocks<true, false>},
    {"flag-between-blocks-with-fences", flag_between_blocks<true, true>},
    {"cooperative-blocks-without-grid-sync", cooperative_blocks<false>},
    {"cooperative-blocks-synchronised", cooperative_blocks<true>},
    {"blocks-far-apart-writing-one-slice", blocks_far_apart<false>},
    {"blocks-far-apart-each-its-slice", blocks_far_apart<true>},
    {"large-blocks-writing-one-slice", large_blocks<false>},
    {"large-blocks-each-its-slice", large_blocks<true>},
    {"large-cooperative-blocks-without-grid-sync", large_cooperative_blocks<false>},
    {"large-cooperative-blocks-synchronised", large_cooperative_blocks<true>},
    {"streams-without-event", two_streams<false>},
    {"streams-synchronised", two_streams<true>},
    {"read-before-programmatic-wait", programmatic_wait<false>},
    {"programmatic-wait-synchronised", programmatic_wait<true>},
    {"graph-read-before-programmatic-wait", programmatic_wait_in_graph<false>},
    {"writes-after-trigger-read-before-programmatic-wait", read_before_wait_of_writes_after_trigger},
    {"graph-programmatic-wait-synchronised", programmatic_wait_in_graph<true>},
    {"events-on-unordered-streams", events_on_unordered_streams},
    {"large-blocks-on-streams-without-event", large_blocks_on_two_streams<false>},
    {"large-blocks-on-streams-synchronised", large_blocks_on_two_streams<true>},
    {"copy-on-another-stream-without-event", copy_on_another_stream<false>},
    {"copy-on-another-stream-synchronised", copy_on_another_stream<true>},
    {"large-blocks-read-before-programmatic-wait", large_blocks_programmatic_wait<false>},
    {"large-blocks-programmatic-wait-synchronised", large_blocks_programmatic_wait<true>},
};

}  // namespace
}  // namespace mnistdp::emu_probe

int main(int argc, char** argv) {
  return mnistdp::emu_probe::run_case("mnistdp_emu_race_probe", mnistdp::emu_probe::kCases, argc, argv);
}
