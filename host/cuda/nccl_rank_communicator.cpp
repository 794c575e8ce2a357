// The multi-process NCCL communicator (host/cuda/cuda_communicators.hpp): one rank per process and GPU.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>

#include "host/cuda/cuda_communicators.hpp"
#include "host/cuda/device_replica.hpp"
#include "host/model/params.hpp"
#include "kernels/cuda/runtime/check.hpp"

namespace mnistdp {

namespace {

using Clock = std::chrono::steady_clock;

class NcclRankCommunicator final : public Communicator {
 public:
  NcclRankCommunicator(DeviceReplica replica, ProcessGroup& group, std::chrono::milliseconds timeout)
      : replica_(replica), group_(group), rank_(group.rank()), size_(group.size()), timeout_(timeout) {
    int version = 0;
    NCCL_CHECK(ncclGetVersion(&version));
    version_ = fmt::format("{}.{}.{}", version / 10000, version / 100 % 100, version % 100);
#ifdef MNISTDP_CUDA_EMULATED
    version_ += " (emulated)";
#endif
    ncclUniqueId id{};
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    group.broadcast(std::as_writable_bytes(std::span(&id, 1)));
    CUDA_CHECK(cudaSetDevice(replica_.device));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t status = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    if (status != ncclSuccess && status != ncclInProgress) {
      if (comm_) static_cast<void>(ncclCommAbort(comm_));
      comm_ = nullptr;
      throw CudaError(fmt::format("NCCL error: ncclCommInitRankConfig (rank {} of {}) failed: {}: {}", rank_,
                                  size_, ncclGetErrorString(status), ncclGetLastError(nullptr)));
    }
    wait_until_idle("ncclCommInitRankConfig (every rank must reach it)");
  }

  ~NcclRankCommunicator() override {
    if (!comm_) return;
    // Destroyed while an exception unwinds (this rank, or another, has failed): the collectives in flight
    // may never complete, so abort at once rather than wait for them.
    if (std::uncaught_exceptions() > exceptions_at_start_) {
      static_cast<void>(ncclCommAbort(comm_));
      static_cast<void>(cudaGetLastError());
      return;
    }
    // Finalize waits for the collectives already issued; if that does not end in time, abort instead.
    const ncclResult_t started = ncclCommFinalize(comm_);
    bool finalised = started == ncclSuccess || started == ncclInProgress;
    const auto deadline = Clock::now() + timeout_;
    ncclResult_t state = ncclInProgress;
    while (finalised && state == ncclInProgress && Clock::now() < deadline) {
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
      if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    finalised = finalised && state == ncclSuccess;
    static_cast<void>(finalised ? ncclCommDestroy(comm_) : ncclCommAbort(comm_));
    static_cast<void>(cudaGetLastError());
  }

  NcclRankCommunicator(const NcclRankCommunicator&) = delete;
  NcclRankCommunicator& operator=(const NcclRankCommunicator&) = delete;

  std::string description() const override {
    return fmt::format("NCCL {} all-reduce, rank {} of {} (one GPU per process)", version_, rank_, size_);
  }

  void all_reduce_gradients(std::span<Replica* const> replicas) override {
    if (replicas.size() != 1 || replicas[0] != replica_.replica)
      throw std::logic_error("NCCL rank all-reduce: made for one replica, called with others");
    require_usable();
    CUDA_CHECK(cudaSetDevice(replica_.device));
    float* grads = replica_.replica->gradient_buffer();  // [ParamLayout::kGradCount] on this process's GPU
    const ncclResult_t status =
        ncclAllReduce(grads, grads, ParamLayout::kGradCount, ncclFloat, ncclSum, comm_, replica_.stream);
    if (status == ncclInProgress) {
      // A non-blocking communicator may still be enqueueing; nothing else may go on its stream until then.
      wait_until_idle("ncclAllReduce");
    } else if (status != ncclSuccess) {
      fail(fmt::format("ncclAllReduce failed: {}: {}", ncclGetErrorString(status), ncclGetLastError(comm_)));
    }
  }

  // Waits for the stream, which holds the all-reduces, while watching NCCL's asynchronous error state: a
  // peer that died or a network that broke shows up there, and would otherwise leave the stream waiting
  // forever.
  void await_completion() override {
    require_usable();
    const auto deadline = Clock::now() + timeout_;
    for (long polls = 0;;) {
      const cudaError_t done = cudaStreamQuery(replica_.stream);
      if (done == cudaSuccess) return;
      if (done != cudaErrorNotReady) CUDA_CHECK(done);
      ncclResult_t state = ncclSuccess;
      NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
      if (state != ncclSuccess && state != ncclInProgress)
        fail(fmt::format("NCCL reported an asynchronous error: {}: {}", ncclGetErrorString(state),
                         ncclGetLastError(comm_)));
      if (Clock::now() >= deadline)
        fail(fmt::format("the all-reduce did not finish within {} s: another rank is hung or gone",
                         static_cast<double>(timeout_.count()) / 1000.0));
      watch_peers(polls++);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  void require_usable() const {
    if (!comm_) throw std::logic_error("NCCL rank all-reduce: the communicator was aborted after an error");
  }

  // Polls until the communicator has no operation in progress; an error or the timeout aborts it.
  void wait_until_idle(const char* what) {
    const auto deadline = Clock::now() + timeout_;
    for (long polls = 0;;) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t queried = ncclCommGetAsyncError(comm_, &state);
      if (queried != ncclSuccess) state = queried;
      if (state == ncclSuccess) return;
      if (state != ncclInProgress)
        fail(fmt::format("{} failed: {}: {}", what, ncclGetErrorString(state), ncclGetLastError(comm_)));
      if (Clock::now() >= deadline)
        fail(fmt::format("{} did not complete within {} s", what,
                         static_cast<double>(timeout_.count()) / 1000.0));
      watch_peers(polls++);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // NCCL does not always see a peer process die (one on the same node, for one); the process group does, and
  // a failing rank's message arrives there. Looked at every 200 polls (about every 10 ms): a system call per
  // peer is too much for every 50 us.
  void watch_peers(long polls) {
    if (polls % 200 != 199) return;
    try {
      group_.check_for_failure();
    } catch (...) {
      static_cast<void>(ncclCommAbort(comm_));
      comm_ = nullptr;
      throw;
    }
  }

  // Aborts the communicator (which also ends its kernels, so the stream drains) and throws.
  [[noreturn]] void fail(const std::string& message) {
    static_cast<void>(ncclCommAbort(comm_));
    comm_ = nullptr;
    throw CudaError(fmt::format("NCCL error on rank {} of {}: {}", rank_, size_, message));
  }

  DeviceReplica replica_;
  ProcessGroup& group_;  // outlives this communicator
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::string version_;
  ncclComm_t comm_ = nullptr;
  int exceptions_at_start_ = std::uncaught_exceptions();
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_rank_communicator(Replica& replica, ProcessGroup& group,
                                                          std::chrono::milliseconds timeout) {
  return std::make_unique<NcclRankCommunicator>(device_replica(&replica, 0, "NCCL rank all-reduce"), group,
                                                timeout);
}

}  // namespace mnistdp
