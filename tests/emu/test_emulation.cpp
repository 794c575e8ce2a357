// The emulated build's checks catch what they claim (docs/emulation.md): each deliberately broken kernel or
// host sequence of broken_kernels.cu fails, every time, and a fault names its kernel and its problem. A fault
// is sticky, as on a GPU; each test that causes one resets the device after it.
#include <nccl.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "emu/src/checks/sanitizer.hpp"
#include "kernels/cuda/runtime/memory.hpp"
#include "tests/emu/broken_kernels.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/scoped_env.hpp"

namespace mnistdp {
namespace {

using Catch::Matchers::Contains;
using gpu_test::to_device;
using gpu_test::to_host;

// Expects `run` to throw CudaError whose message contains every one of `parts`, then clears the fault.
template <typename Run>
void expect_fault(Run run, const std::vector<std::string>& parts) {
  std::string message;
  try {
    run();
  } catch (const CudaError& e) {
    message = e.what();
  }
  CAPTURE(message);
  CHECK_FALSE(message.empty());
  for (const std::string& part : parts)
    CHECK_THAT(message, Contains(part));
  REQUIRE(cudaDeviceReset() == cudaSuccess);
  static_cast<void>(cudaGetLastError());
}

TEST_CASE("the device says it is emulated", "[emu]") {
  cudaDeviceProp prop{};
  REQUIRE(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  CHECK_THAT(std::string(prop.name), Contains("emulated"));
  int clock = 0;
  CHECK(cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, 0) == cudaErrorNotSupported);
  static_cast<void>(cudaGetLastError());
}

TEST_CASE("a missing __syncthreads() before reading shared memory changes the result", "[emu]") {
  const int threads = 128;
  const auto in = to_device(std::vector<float>(threads, 1.0f));
  DeviceBuffer<float> out(1);
  Stream s;
  emu_test::block_sum(in.data(), out.data(), threads, /*barrier=*/true, s.get());
  s.synchronize();
  CHECK(to_host(out)[0] == static_cast<float>(threads));
  // Thread 0 reads slots that threads scheduled after it have not written: shared memory starts as NaN.
  emu_test::block_sum(in.data(), out.data(), threads, /*barrier=*/false, s.get());
  s.synchronize();
  CHECK(std::isnan(to_host(out)[0]));
}

TEST_CASE("a missing __syncwarp() before reading a neighbour lane's shared slot changes the result",
          "[emu]") {
  DeviceBuffer<float> out(32);
  Stream s;
  emu_test::warp_neighbour(out.data(), /*sync_warp=*/true, s.get());
  s.synchronize();
  std::vector<float> want(32);
  for (int lane = 0; lane < 32; ++lane)
    want[static_cast<std::size_t>(lane)] = static_cast<float>((lane + 1) % 32);
  CHECK(to_host(out) == want);
  // Without it each lane runs to its read before the lanes scheduled after it have written: NaN.
  emu_test::warp_neighbour(out.data(), /*sync_warp=*/false, s.get());
  s.synchronize();
  const auto got = to_host(out);
  CHECK(std::count_if(got.begin(), got.end(), [](float v) { return std::isnan(v); }) > 0);
}

TEST_CASE("a __syncwarp() with a lane missing stops the kernel and names it", "[emu]") {
  DeviceBuffer<float> out(32);
  Stream s;
  emu_test::syncwarp_with_a_lane_missing(out.data(), s.get());
  expect_fault([&] { s.synchronize(); }, {"syncwarp_with_a_lane_missing_kernel", "__syncwarp", "(31,0,0)"});
}

TEST_CASE("static shared memory starts as NaN in every block, so a read nobody wrote shows", "[emu]") {
  // Blocks run one after another on the same OS thread: were the array kept from the block before, its
  // values (all finite) would hide the missing barrier from every block but the first.
  const int blocks = 4;
  const auto in = to_device(std::vector<float>(blocks * 128, 1.0f));
  DeviceBuffer<float> out(blocks);
  Stream s;
  emu_test::static_block_sum_without_barrier(in.data(), out.data(), blocks, s.get());
  s.synchronize();
  const std::vector<float> sums = to_host(out);
  CHECK(std::all_of(sums.begin(), sums.end(), [](float v) { return std::isnan(v); }));
}

TEST_CASE("a missing cudaStreamWaitEvent between two streams changes the result", "[emu]") {
  const int n = 300;
  Stream producer, consumer;
  SECTION("without the wait, the reader runs first and copies memory nobody wrote") {
    DeviceBuffer<float> buf(n), out(n);
    emu_test::fill(buf.data(), n, 2.0f, producer.get());
    emu_test::copy(buf.data(), out.data(), n, consumer.get());
    producer.synchronize();
    consumer.synchronize();
    const std::vector<float> got = to_host(out);
    CHECK(std::all_of(got.begin(), got.end(), [](float v) { return std::isnan(v); }));
  }
  SECTION("with it, the reader sees the writer's values") {
    DeviceBuffer<float> buf(n), out(n);
    Event written(cudaEventDisableTiming);
    emu_test::fill(buf.data(), n, 2.0f, producer.get());
    written.record(producer.get());
    CUDA_CHECK(cudaStreamWaitEvent(consumer.get(), written.get(), 0));
    emu_test::copy(buf.data(), out.data(), n, consumer.get());
    consumer.synchronize();
    CHECK(to_host(out) == std::vector<float>(n, 2.0f));
  }
}

TEST_CASE("a read of a copy's destination before its stream is synchronised sees no result", "[emu]") {
  const int n = 64;
  DeviceBuffer<float> dev(n);
  PinnedBuffer<float> host(n);
  std::memset(host.data(), 0, n * sizeof(float));
  Stream s;
  emu_test::fill(dev.data(), n, 3.0f, s.get());
  CUDA_CHECK(cudaMemcpyAsync(host.data(), dev.data(), n * sizeof(float), cudaMemcpyDeviceToHost, s.get()));
  // Queued work runs only once the host waits for something: the copy has not happened.
  CHECK(host.data()[0] == 0.0f);
  s.synchronize();
  CHECK(host.data()[0] == 3.0f);
  CHECK(host.data()[n - 1] == 3.0f);
}

TEST_CASE("a shuffle with a lane missing stops the kernel and names it", "[emu]") {
  DeviceBuffer<float> out(32);
  Stream s;
  emu_test::shuffle_with_a_lane_missing(out.data(), s.get());
  expect_fault([&] { s.synchronize(); },
               {"shuffle_with_a_lane_missing_kernel", "__shfl_xor_sync", "(31,0,0)"});
}

// Under AddressSanitizer (preset emu-asan) the guard zone is poisoned: ASan reports the store itself, and the
// sanitizer probes (sanitizer_probe.cu) check that report. MNISTDP_EMU_ASAN: emu/src/checks/sanitizer.hpp's
// word for AddressSanitizer, whichever compiler.
#if !defined(MNISTDP_EMU_ASAN)
TEST_CASE("a store past the end of an allocation stops the kernel and names it", "[emu]") {
  DeviceBuffer<float> p(10);
  Stream s;
  emu_test::store_past_the_end(p.data(), 10, s.get());
  expect_fault([&] { s.synchronize(); }, {"store_past_the_end_kernel", "past the end", "40 bytes"});
}
#endif

TEST_CASE("a misaligned float4 load stops the kernel with cudaErrorMisalignedAddress and names it",
          "[emu][alignment]") {
  // An H200 faults on a 16-byte access at an address 4 mod 16; a host core runs it (docs/emulation.md,
  // "Alignment"). The twin, at offset 4 floats, is aligned and sums each slice.
  const int threads = 40;
  std::vector<float> values(4 * threads + 4);
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(i);
  const auto in = to_device(values);
  DeviceBuffer<float> out(threads);
  Stream s;
  emu_test::load_float4_at(in.data(), 4, out.data(), threads, s.get());
  s.synchronize();
  const std::vector<float> sums = to_host(out);
  for (int t = 0; t < threads; ++t) {
    CAPTURE(t);
    const float first = static_cast<float>(4 * t + 4);
    CHECK(sums[static_cast<std::size_t>(t)] == 4 * first + 6);
  }
  emu_test::load_float4_at(in.data(), 1, out.data(), threads, s.get());
  std::string message;
  try {
    s.synchronize();
  } catch (const CudaError& e) {
    message = e.what();
  }
  CAPTURE(message);
  CHECK_THAT(message, Contains("cudaErrorMisalignedAddress") && Contains("load_float4_at_kernel") &&
                          Contains("misaligned address") && Contains("float4") &&
                          Contains("16-byte alignment (it is 4 mod 16)"));
  // Sticky, as on a GPU: every later call on the device returns it.
  CHECK(cudaDeviceSynchronize() == cudaErrorMisalignedAddress);
  REQUIRE(cudaDeviceReset() == cudaSuccess);
  static_cast<void>(cudaGetLastError());
}

TEST_CASE("a dependent kernel that reads its primary's output before its programmatic wait sees old values",
          "[emu]") {
  // The checking mode MNISTDP_EMU_PDL=overlap, the default: the dependent kernel runs up to its wait while
  // the primary is held after its trigger, so a read before the wait misses all the primary's writes.
  const int n = 300;  // not a multiple of the 128-thread blocks
  auto src = to_device(std::vector<float>(n, 0.0f));
  DeviceBuffer<float> early(n), late(n);
  Stream s;
  emu_test::fill_after_trigger(src.data(), n, 1.0f, s.get());
  emu_test::copy_programmatically(src.data(), early.data(), n, /*read_first=*/true, s.get());
  emu_test::fill_after_trigger(src.data(), n, 2.0f, s.get());
  emu_test::copy_programmatically(src.data(), late.data(), n, /*read_first=*/false, s.get());
  s.synchronize();
  CHECK(to_host(early) == std::vector<float>(n, 0.0f));  // before the wait: the values from before
  CHECK(to_host(late) == std::vector<float>(n, 2.0f));   // after it: the primary's, all of them
}

TEST_CASE("a block triggers at its first thread's cudaTriggerProgrammaticLaunchCompletion()", "[emu]") {
  // The programming guide counts thread blocks ("when all primary thread blocks have launched and executed
  // cudaTriggerProgrammaticLaunchCompletion"), and PTX gives a block's trigger to the first of its threads
  // that calls it. The planted bug takes the block to trigger only once every thread has called it or
  // exited, so after the writes of the threads that never call it: its dependent, reading before the wait,
  // sees none of them. The twin reads after the wait.
  const int n = 300;
  auto src = to_device(std::vector<float>(n, 0.0f));
  DeviceBuffer<float> early(n), late(n);
  Stream s;
  emu_test::fill_after_one_threads_trigger(src.data(), n, 1.0f, s.get());
  emu_test::copy_programmatically(src.data(), early.data(), n, /*read_first=*/true, s.get());
  emu_test::fill_after_one_threads_trigger(src.data(), n, 2.0f, s.get());
  emu_test::copy_programmatically(src.data(), late.data(), n, /*read_first=*/false, s.get());
  s.synchronize();
  CHECK(to_host(early) == std::vector<float>(n, 0.0f));
  CHECK(to_host(late) == std::vector<float>(n, 2.0f));
}

// A graph captured from `s` (one stream: the nodes in a chain) by `enqueue`, instantiated.
template <typename Enqueue>
cudaGraphExec_t capture(cudaStream_t s, Enqueue enqueue, std::size_t* nodes = nullptr) {
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  enqueue();
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  if (nodes) REQUIRE(cudaGraphGetNodes(graph, nullptr, nodes) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  return exec;
}

TEST_CASE(
    "a graph keeps its captured programmatic edges: a read before the wait sees old values on each replay",
    "[emu]") {
  // The same launches as on a stream above, captured: each programmatic launch right after a kernel becomes
  // a programmatic edge, and every replay overlaps the dependent with its primary as the stream does.
  const int n = 300;
  auto src = to_device(std::vector<float>(n, 0.0f));
  DeviceBuffer<float> early(n), late(n);
  Stream s;
  std::size_t nodes = 0;
  cudaGraphExec_t exec = capture(
      s.get(),
      [&] {
        emu_test::fill_after_trigger(src.data(), n, 1.0f, s.get());
        emu_test::copy_programmatically(src.data(), early.data(), n, /*read_first=*/true, s.get());
        emu_test::fill_after_trigger(src.data(), n, 2.0f, s.get());
        emu_test::copy_programmatically(src.data(), late.data(), n, /*read_first=*/false, s.get());
      },
      &nodes);
  CHECK(nodes == 4);
  REQUIRE(cudaGraphLaunch(exec, s.get()) == cudaSuccess);
  s.synchronize();
  CHECK(to_host(early) == std::vector<float>(n, 0.0f));  // before the wait: the values from before
  CHECK(to_host(late) == std::vector<float>(n, 2.0f));   // after it: the primary's, all of them
  // Replayed, the early read sees what the last replay left (2), never its own primary's 1.
  REQUIRE(cudaGraphLaunch(exec, s.get()) == cudaSuccess);
  s.synchronize();
  CHECK(to_host(early) == std::vector<float>(n, 2.0f));
  CHECK(to_host(late) == std::vector<float>(n, 2.0f));
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
}

TEST_CASE("a graph's replay overlaps only along its programmatic edges, never with work outside it",
          "[emu]") {
  // cudaGraphLaunch: "Each launch is ordered behind both any previous work in stream and any previous
  // launches of graphExec". A programmatic launch that is the capture's first node has no edge, and work
  // after the graph on its stream starts after the graph has finished.
  const int n = 300;
  auto src = to_device(std::vector<float>(n, 0.0f));
  DeviceBuffer<float> first(n), after(n);
  Stream s;
  cudaGraphExec_t dependent_alone = capture(s.get(), [&] {
    emu_test::copy_programmatically(src.data(), first.data(), n, /*read_first=*/true, s.get());
  });
  cudaGraphExec_t primary_alone =
      capture(s.get(), [&] { emu_test::fill_after_trigger(src.data(), n, 2.0f, s.get()); });
  emu_test::fill_after_trigger(src.data(), n, 1.0f, s.get());
  REQUIRE(cudaGraphLaunch(dependent_alone, s.get()) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(primary_alone, s.get()) == cudaSuccess);
  emu_test::copy_programmatically(src.data(), after.data(), n, /*read_first=*/true, s.get());
  s.synchronize();
  CHECK(to_host(first) == std::vector<float>(n, 1.0f));
  CHECK(to_host(after) == std::vector<float>(n, 2.0f));
  CHECK(cudaGraphExecDestroy(dependent_alone) == cudaSuccess);
  CHECK(cudaGraphExecDestroy(primary_alone) == cudaSuccess);
}

TEST_CASE("threads that leave while others wait at __syncthreads() stop the kernel", "[emu]") {
  DeviceBuffer<float> out(64);
  Stream s;
  emu_test::barrier_with_threads_gone(out.data(), s.get());
  expect_fault([&] { s.synchronize(); }, {"barrier_with_threads_gone_kernel", "__syncthreads()"});
}

TEST_CASE("grid.sync() outside a cooperative launch stops the kernel", "[emu]") {
  Stream s;
  emu_test::grid_sync_without_cooperative_launch(s.get());
  expect_fault([&] { s.synchronize(); }, {"grid_sync_kernel", "not launched cooperatively"});
}

// A cuBLAS product and an NCCL all-reduce whose buffers are `a` (read) and `c` (written), n floats each, on
// the current device and the stream given; synchronised, so that a fault reaches the host.
void sgemm_and_all_reduce(const float* a, float* c, int n, cudaStream_t stream) {
  {
    CublasHandle cublas(stream);
    const float one = 1.0f, zero = 0.0f;
    // c [n, 1] = a [n, 1] times 1 [1, 1]: a reads n floats of a and one of itself.
    CUBLAS_CHECK(cublasSgemm(cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, 1, 1, &one, a, n, a, 1, &zero, c, n));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  ncclComm_t comm = nullptr;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  REQUIRE(ncclCommInitAll(&comm, 1, &device) == ncclSuccess);
  const ncclResult_t result =
      ncclAllReduce(a, c, static_cast<std::size_t>(n), ncclFloat, ncclSum, comm, stream);
  const cudaError_t synced = cudaStreamSynchronize(stream);
  static_cast<void>(ncclCommDestroy(comm));
  REQUIRE(result == ncclSuccess);
  CUDA_CHECK(synced);
}

TEST_CASE("cuBLAS and NCCL given memory their device cannot reach fault with an illegal address, as on a GPU",
          "[emu]") {
  const int n = 40;
  Stream stream;
  // The twin: device memory, and pinned host memory, which a device reaches.
  {
    const DeviceBuffer<float> a = to_device(std::vector<float>(n, 3.0f));
    DeviceBuffer<float> c(n);
    sgemm_and_all_reduce(a.data(), c.data(), n, stream.get());
    CHECK(to_host(c) == std::vector<float>(n, 3.0f));
    PinnedBuffer<float> pinned(n);
    std::fill(pinned.data(), pinned.data() + n, 2.0f);
    sgemm_and_all_reduce(pinned.data(), c.data(), n, stream.get());
    CHECK(to_host(c) == std::vector<float>(n, 2.0f));
  }
  // The planted mistakes: pageable host memory given to each library.
  std::vector<float> pageable(n, 1.0f);
  const DeviceBuffer<float> a = to_device(std::vector<float>(n, 3.0f));
  expect_fault(
      [&] {
        DeviceBuffer<float> c(n);
        CublasHandle cublas(stream.get());
        const float one = 1.0f, zero = 0.0f;
        CUBLAS_CHECK(cublasSgemm(cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, 1, 1, &one, pageable.data(), n,
                                 a.data(), 1, &zero, c.data(), n));
        CUDA_CHECK(cudaStreamSynchronize(stream.get()));
      },
      {"illegal address", "cublasSgemm on device 0", "in no live allocation (pageable host memory"});
  expect_fault(
      [&] {
        ncclComm_t comm = nullptr;
        int device = 0;
        REQUIRE(ncclCommInitAll(&comm, 1, &device) == ncclSuccess);
        const ncclResult_t result = ncclAllReduce(a.data(), pageable.data(), static_cast<std::size_t>(n),
                                                  ncclFloat, ncclSum, comm, stream.get());
        const cudaError_t synced = cudaStreamSynchronize(stream.get());
        static_cast<void>(ncclCommDestroy(comm));
        REQUIRE(result == ncclSuccess);
        CUDA_CHECK(synced);
      },
      {"illegal address", "ncclAllReduce on device 0", "pageable host memory"});
}

// Run with two emulated devices (tests/CMakeLists.txt registers it so); skipped with one.
TEST_CASE("an event is recorded and timed on its own device's streams alone, as on a GPU",
          "[emu][two_devices]") {
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (devices < 2) gpu_test::skip_test("needs two emulated devices (MNISTDP_EMU_DEVICES=2)");
  CUDA_CHECK(cudaSetDevice(0));
  Event of_zero;
  Stream stream_of_zero;
  CUDA_CHECK(cudaSetDevice(1));
  Event of_one;
  Stream stream_of_one;
  // The planted mistake: device 0's event recorded on device 1's stream, refused, naming both devices.
  CHECK(cudaEventRecord(of_zero.get(), stream_of_one.get()) == cudaErrorInvalidResourceHandle);
  const std::string refused = cudaGetErrorString(cudaErrorInvalidResourceHandle);
  CHECK_THAT(refused, Contains("event of device 0") && Contains("stream of device 1"));
  static_cast<void>(cudaGetLastError());
  // Its twin: each event on its own device's stream (the current device does not matter), and device 1's
  // stream waiting on device 0's event, which a GPU allows.
  CHECK(cudaEventRecord(of_one.get(), stream_of_one.get()) == cudaSuccess);
  CHECK(cudaEventRecord(of_zero.get(), stream_of_zero.get()) == cudaSuccess);
  CHECK(cudaStreamWaitEvent(stream_of_one.get(), of_zero.get(), 0) == cudaSuccess);
  stream_of_zero.synchronize();
  stream_of_one.synchronize();
  float ms = -1.0f;
  // The time between two devices' events is refused; between two of one device's, measured.
  CHECK(cudaEventElapsedTime(&ms, of_zero.get(), of_one.get()) == cudaErrorInvalidResourceHandle);
  static_cast<void>(cudaGetLastError());
  Event later_of_one;
  CHECK(cudaEventRecord(later_of_one.get(), stream_of_one.get()) == cudaSuccess);
  stream_of_one.synchronize();
  CHECK(cudaEventElapsedTime(&ms, of_one.get(), later_of_one.get()) == cudaSuccess);
  CHECK(ms >= 0.0f);
  // An event never recorded has no time: an invalid handle, as the runtime documents, not "not ready".
  Event never;
  CHECK(cudaEventElapsedTime(&ms, never.get(), of_one.get()) == cudaErrorInvalidResourceHandle);
  static_cast<void>(cudaGetLastError());
  CUDA_CHECK(cudaSetDevice(0));
}

TEST_CASE("calls that are illegal during a stream capture fail as on a GPU", "[emu]") {
  DeviceBuffer<float> dev(4);
  std::vector<float> host(4, 1.0f);
  Stream s;
  auto fails_capture = [&](const std::function<cudaError_t()>& call) {
    REQUIRE(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    CHECK(call() == cudaErrorStreamCaptureUnsupported);
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(s.get(), &graph) == cudaErrorStreamCaptureInvalidated);
    CHECK(graph == nullptr);
    static_cast<void>(cudaGetLastError());
  };
  fails_capture([&] { return cudaMemcpy(dev.data(), host.data(), 16, cudaMemcpyHostToDevice); });
  fails_capture([&] {
    void* p = nullptr;
    return cudaMalloc(&p, 16);
  });
  fails_capture([&] { return cudaStreamSynchronize(s.get()); });
  fails_capture([&] { return cudaDeviceSynchronize(); });
}

TEST_CASE("a copy's kind is checked against where its pointers live", "[emu]") {
  DeviceBuffer<float> dev(4);
  std::vector<float> host(4, 1.0f);
  CHECK(cudaMemcpy(dev.data(), host.data(), 16, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(host.data(), host.data() + 2, 8, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(dev.data(), host.data(), 16, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(dev.data(), host.data(), 20, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK_THAT(std::string(cudaGetErrorString(cudaErrorInvalidValue)), Contains("past the end"));
  static_cast<void>(cudaGetLastError());
}

using testing::ScopedEnv;

// Polls a non-blocking communicator until its call is no longer in progress; returns its state then.
ncclResult_t poll_until_done(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  for (int polls = 0; state == ncclInProgress && polls < 1000; ++polls)
    REQUIRE(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  return state;
}

// The protocol of a non-blocking communicator (NCCL's "nonblocking" mode, which the multi-process
// communicator uses), with one of two bugs planted or none: two all-reduces in place on a buffer of ones,
// then a memset of the buffer on the same stream. Returns the buffer (a world of one leaves it as it is),
// or the first NCCL error met as "CALL: RESULT: MESSAGE".
enum class ProtocolBug { none, next_call_before_polling, work_on_the_stream_before_polling };

std::string nonblocking_protocol(ProtocolBug bug) {
  DeviceBuffer<float> buffer(4);
  CUDA_CHECK(cudaMemcpy(buffer.data(), std::vector<float>(4, 1.0f).data(), 16, cudaMemcpyHostToDevice));
  Stream s;
  ncclUniqueId id{};
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const auto error = [&](const char* call, ncclResult_t r) {
    const std::string what = std::string(call) + ": " + ncclGetErrorString(r) + ": " + ncclGetLastError(comm);
    static_cast<void>(ncclCommAbort(comm));  // allowed whatever the communicator's state
    return what;
  };
  ncclResult_t r = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
  CHECK(r == ncclInProgress);  // MNISTDP_EMU_NCCL_POLLS > 0: every call is in progress for a poll at least
  if (r = poll_until_done(comm); r != ncclSuccess) return error("ncclCommInitRankConfig", r);
  for (int i = 0; i < 2; ++i) {
    r = ncclAllReduce(buffer.data(), buffer.data(), 4, ncclFloat, ncclSum, comm, s.get());
    if (r != ncclSuccess && r != ncclInProgress) return error("ncclAllReduce", r);
    if (bug == ProtocolBug::work_on_the_stream_before_polling)
      CUDA_CHECK(cudaMemsetAsync(buffer.data(), 0, 16, s.get()));
    if (bug != ProtocolBug::next_call_before_polling)
      if (r = poll_until_done(comm); r != ncclSuccess) return error("ncclCommGetAsyncError", r);
  }
  if (bug == ProtocolBug::next_call_before_polling)
    if (r = poll_until_done(comm); r != ncclSuccess) return error("ncclCommGetAsyncError", r);
  s.synchronize();
  const std::vector<float> result = to_host(buffer);
  if (r = ncclCommFinalize(comm); r != ncclSuccess && r != ncclInProgress)
    return error("ncclCommFinalize", r);
  if (r = poll_until_done(comm); r != ncclSuccess) return error("ncclCommFinalize", r);
  REQUIRE(ncclCommDestroy(comm) == ncclSuccess);
  std::string values;
  for (float v : result)
    values += std::to_string(v) + " ";
  return values;
}

TEST_CASE("a non-blocking NCCL call used before it is polled to completion is reported, naming the call",
          "[emu][nccl]") {
  const ScopedEnv polls("MNISTDP_EMU_NCCL_POLLS", "3");
  CHECK(nonblocking_protocol(ProtocolBug::none) == "1.000000 1.000000 1.000000 1.000000 ");
  // NCCL answers the next call on the communicator with ncclInvalidArgument.
  const std::string next = nonblocking_protocol(ProtocolBug::next_call_before_polling);
  CHECK_THAT(next, Contains("ncclAllReduce: invalid argument: emulated NCCL: ncclAllReduce on a non-blocking "
                            "communicator whose ncclAllReduce #1 is still in progress"));
  // Work put on the stream before the all-reduce is (NCCL would run it first): the communicator's error.
  const std::string work = nonblocking_protocol(ProtocolBug::work_on_the_stream_before_polling);
  CHECK_THAT(work,
             Contains("ncclCommGetAsyncError: invalid usage: emulated NCCL: work was put on the stream of "
                      "ncclAllReduce #1 while it was in progress"));
}

TEST_CASE("a failure planted in the emulated NCCL arrives through ncclCommGetAsyncError", "[emu][nccl]") {
  for (const char* polls : {"0", "2"}) {
    CAPTURE(polls);
    const ScopedEnv p("MNISTDP_EMU_NCCL_POLLS", polls);
    const ScopedEnv fail("MNISTDP_EMU_NCCL_FAIL", "ncclAllReduce:2:ncclRemoteError");
    ncclUniqueId id{};
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const ncclResult_t init = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
    REQUIRE((init == ncclSuccess || init == ncclInProgress));
    REQUIRE(poll_until_done(comm) == ncclSuccess);
    DeviceBuffer<float> buffer(4);
    Stream s;
    CUDA_CHECK(cudaMemsetAsync(buffer.data(), 0, 16, s.get()));
    const auto all_reduce = [&] {
      return ncclAllReduce(buffer.data(), buffer.data(), 4, ncclFloat, ncclSum, comm, s.get());
    };
    const ncclResult_t first = all_reduce();
    CHECK(first == (polls[0] == '0' ? ncclSuccess : ncclInProgress));
    CHECK(poll_until_done(comm) == ncclSuccess);
    // The call itself succeeds; its failure is the communicator's state once it completes.
    const ncclResult_t second = all_reduce();
    CHECK(second == (polls[0] == '0' ? ncclSuccess : ncclInProgress));
    CHECK(poll_until_done(comm) == ncclRemoteError);
    CHECK_THAT(std::string(ncclGetLastError(comm)),
               Contains("ncclAllReduce #2 on rank 0 ended with ncclRemoteError"));
    // The failed all-reduce is held on its stream, as NCCL's kernel waits for its peer ...
    CHECK(cudaStreamQuery(s.get()) == cudaErrorNotReady);
    // ... every call but the abort is refused with the error ...
    CHECK(all_reduce() == ncclRemoteError);
    CHECK(ncclCommFinalize(comm) == ncclRemoteError);
    CHECK(ncclCommDestroy(comm) == ncclInvalidUsage);
    // ... and the abort ends it: the stream drains.
    CHECK(ncclCommAbort(comm) == ncclSuccess);
    s.synchronize();
    static_cast<void>(cudaGetLastError());
  }
}

}  // namespace
}  // namespace mnistdp
