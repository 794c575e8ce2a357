#include "host/cuda/cuda_communicators.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nccl.h>

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "host/cuda/device_replica.hpp"
#include "host/model/params.hpp"
#include "kernels/cuda/ops/replica_sum.hpp"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/memory.hpp"

namespace mnistdp {
namespace {

using L = ParamLayout;

// A communicator is made for one list of replicas; all_reduce_gradients must be given that same list, in the
// same order (the rank of a replica is its position).
void check_same_replicas(std::span<Replica* const> given, const std::vector<DeviceReplica>& mine,
                         const char* who) {
  if (given.size() != mine.size()) {
    throw std::logic_error(
        fmt::format("{}: all_reduce_gradients over {} replicas, but the communicator was "
                    "made for {}",
                    who, given.size(), mine.size()));
  }
  for (std::size_t r = 0; r < mine.size(); ++r) {
    if (given[r] != mine[r].replica) {
      throw std::logic_error(
          fmt::format("{}: replica {} is not the one the communicator was made for", who, r));
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// NCCL: one rank per GPU, in one process.

// "2.28.9" from ncclGetVersion's code (major * 10000 + minor * 100 + patch since NCCL 2.9).
std::string nccl_version() {
  int code = 0;
  NCCL_CHECK(ncclGetVersion(&code));
#ifdef MNISTDP_CUDA_EMULATED
  return fmt::format("{}.{}.{} (emulated)", code / 10000, code / 100 % 100, code % 100);
#else
  return fmt::format("{}.{}.{}", code / 10000, code / 100 % 100, code % 100);
#endif
}

// The communicators of one ncclCommInitAll: one per device, rank r on devices[r]. Destroyed with
// ncclCommDestroy, which first finalises each communicator, that is, waits for the collectives already issued
// on it (NCCL's documentation of ncclCommFinalize and ncclCommDestroy); so the replicas' streams may still be
// busy when this is destroyed, but the replicas must outlive it (the all-reduce reads their buffers).
// ncclCommAbort instead once an error has left them unusable: Destroy could wait forever on a collective that
// will never finish.
class NcclComms {
 public:
  explicit NcclComms(const std::vector<int>& devices) : comms_(devices.size(), nullptr) {
    const ncclResult_t status =
        ncclCommInitAll(comms_.data(), static_cast<int>(devices.size()), devices.data());
    if (status != ncclSuccess) {
      // A failed grouped initialisation can leave allocated communicators behind, in an error state.
      abort_all();
      const char* detail = ncclGetLastError(nullptr);
      throw CudaError(fmt::format("NCCL error: ncclCommInitAll over CUDA devices {} failed: {}{}{}",
                                  fmt::join(devices, ", "), ncclGetErrorString(status),
                                  detail && *detail ? ": " : "", detail ? detail : ""));
    }
  }
  ~NcclComms() {
    if (unusable_) {
      abort_all();
    } else {
      for (ncclComm_t& comm : comms_) {
        if (comm) static_cast<void>(ncclCommDestroy(comm));  // never throws: errors at exit are dropped
        comm = nullptr;
      }
    }
    static_cast<void>(cudaGetLastError());
  }
  NcclComms(const NcclComms&) = delete;
  NcclComms& operator=(const NcclComms&) = delete;

  ncclComm_t operator[](std::size_t rank) const { return comms_[rank]; }
  void mark_unusable() { unusable_ = true; }
  bool unusable() const { return unusable_; }

 private:
  void abort_all() noexcept {
    for (ncclComm_t& comm : comms_) {
      if (comm) static_cast<void>(ncclCommAbort(comm));
      comm = nullptr;
    }
  }

  std::vector<ncclComm_t> comms_;  // [ranks]
  bool unusable_ = false;
};

std::vector<int> distinct_devices(const std::vector<DeviceReplica>& replicas) {
  std::vector<int> devices;
  for (std::size_t r = 0; r < replicas.size(); ++r) {
    const int device = replicas[r].device;
    for (std::size_t q = 0; q < r; ++q) {
      if (devices[q] == device) {
        throw std::invalid_argument(fmt::format(
            "NCCL all-reduce: replicas {} and {} are both on CUDA device {} (cuda:{}); NCCL takes one "
            "replica per GPU (it refuses two ranks on one device). For several replicas on one GPU use the "
            "same-device communicator",
            q, r, device, device));
      }
    }
    devices.push_back(device);
  }
  return devices;
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::vector<DeviceReplica> replicas)
      : replicas_(std::move(replicas)),
        devices_(distinct_devices(replicas_)),
        version_(nccl_version()),
        comms_(init(devices_)) {}

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  std::string description() const override {
    return fmt::format("NCCL {} all-reduce over {} GPU{}", version_, replicas_.size(),
                       replicas_.size() == 1 ? "" : "s");
  }

  // One grouped call: ncclAllReduce on every rank between ncclGroupStart and ncclGroupEnd, which NCCL needs
  // when one thread drives several devices (each call would otherwise wait for the others' ranks). Each is
  // enqueued on its replica's stream, after that replica's compute_gradients and before its sgd_step, in
  // place on the flat gradient buffer, loss slot included; the host waits for nothing.
  //
  // ncclCommGetAsyncError is not polled here. These communicators are blocking (the default configuration),
  // so every error NCCL detects while enqueuing is returned by the calls below, and ncclGroupEnd never
  // answers ncclInProgress. What it cannot detect then (a peer or network failure, which one process over
  // NVLink or PCIe does not have; a device fault, which the next synchronising CUDA call reports) would show
  // up in ncclCommGetAsyncError, and the cure for it, a watchdog that polls it and calls ncclCommAbort to
  // release a hung stream, belongs with the rest of the failure handling.
  void all_reduce_gradients(std::span<Replica* const> replicas) override {
    check_same_replicas(replicas, replicas_, "NCCL all-reduce");
    if (comms_.unusable()) {
      throw std::logic_error(
          "NCCL all-reduce: an earlier NCCL call failed and left the communicators unusable");
    }
    const DeviceGuard guard;
    try {
      NCCL_CHECK(ncclGroupStart());
      try {
        for (std::size_t r = 0; r < replicas_.size(); ++r) {
          CUDA_CHECK(cudaSetDevice(devices_[r]));
          float* grads = replicas_[r].replica->gradient_buffer();  // [ParamLayout::kGradCount] on devices_[r]
          NCCL_CHECK(
              ncclAllReduce(grads, grads, L::kGradCount, ncclFloat, ncclSum, comms_[r], replicas_[r].stream));
        }
      } catch (...) {
        static_cast<void>(ncclGroupEnd());  // closes the group (and reports the same failure)
        throw;
      }
      NCCL_CHECK(ncclGroupEnd());
    } catch (...) {
      comms_.mark_unusable();
      throw;
    }
  }

 private:
  static NcclComms init(const std::vector<int>& devices) {
    // ncclCommInitAll makes each device current in turn; leave the caller's current device as it was.
    const DeviceGuard guard;
    return NcclComms(devices);
  }

  std::vector<DeviceReplica> replicas_;  // rank r is replicas_[r]
  std::vector<int> devices_;             // [ranks]: replicas_[r].device
  std::string version_;
  NcclComms comms_;
};

// ---------------------------------------------------------------------------------------------------------
// Several replicas on one GPU: reduce to replica 0 with a kernel, then broadcast with copies.
//
// The order of one step, where s_r is replica r's stream and b_r its gradient buffer (r = 1 .. N-1), and
// [e] records event e:
//
//   s_r: compute_gradients, [ready_r], wait(summed), copy b_0 to b_r, [copied_r], sgd_step
//   s_0: compute_gradients, wait(ready_r) for all r, b_0 = b_0 + b_1 + ... (the kernel), [summed],
//        wait(copied_r) for all r, sgd_step, and the next step's compute_gradients
//
// Each hazard and the edge that orders it:
// - the kernel reads b_r after replica r wrote it:                       ready_r (s_r -> s_0)
// - the copy reads b_0 after the kernel wrote it, and overwrites b_r
//   only after the kernel read it:                                       summed (s_0 -> s_r)
// - replica r's sgd_step reads b_r after the copy wrote it:              the order of s_r
// - replica 0's next compute_gradients overwrites b_0 only after every
//   copy has read it:                                                    copied_r (s_r -> s_0)
// - replica r's next compute_gradients overwrites b_r only after the
//   copy wrote it and the kernel read it:                                the order of s_r, after summed
// The wait for copied_r also holds back replica 0's sgd_step, which could run beside the copies (both only
// read b_0); it cannot be placed later, because nothing of the communicator runs between that sgd_step and
// the next compute_gradients, and the copies of 0.8 MB take a few microseconds.
//
// Events can be recorded again while waits on an earlier record are pending: cudaStreamWaitEvent waits for
// the record that was the latest when it was called, so one set of events serves every step.

std::string same_device_name(const std::vector<DeviceReplica>& replicas) {
  const int device = replicas[0].device;
  for (std::size_t r = 1; r < replicas.size(); ++r) {
    if (replicas[r].device != device) {
      throw std::invalid_argument(fmt::format(
          "same-device all-reduce: replica {} is on CUDA device {} (cuda:{}) but replica 0 is on device {} "
          "(cuda:{}); all replicas must share one GPU. For one replica per GPU use the NCCL communicator",
          r, replicas[r].device, replicas[r].device, device, device));
    }
  }
  return fmt::format("cuda:{}", device);
}

class SameDeviceCommunicator final : public Communicator {
 public:
  explicit SameDeviceCommunicator(std::vector<DeviceReplica> replicas)
      : replicas_(std::move(replicas)),
        device_name_(same_device_name(replicas_)),
        device_(replicas_[0].device) {
    const std::size_t n = replicas_.size();
    for (const DeviceReplica& placed : replicas_)
      buffers_.push_back(placed.replica->gradient_buffer());
    if (n < 2) return;  // one replica: the sum is its own buffer, nothing to do or to allocate

    const DeviceGuard guard;
    CUDA_CHECK(cudaSetDevice(device_));  // the events and the table belong to this device
    // The buffers never move (a replica allocates its gradient buffer once), so the table of their
    // addresses is uploaded once. On replica 0's stream, the kernel's, and waited for, so that the host
    // vector is free to go and the table is in place before any kernel can read it.
    std::vector<const float*> table(buffers_.begin(), buffers_.end());
    device_table_ = DeviceBuffer<const float*>(n);
    const cudaStream_t root = replicas_[0].stream;
    CUDA_CHECK(cudaMemcpyAsync(device_table_.data(), table.data(), device_table_.bytes(),
                               cudaMemcpyHostToDevice, root));
    CUDA_CHECK(cudaStreamSynchronize(root));
    ready_.reserve(n - 1);
    copied_.reserve(n - 1);
    for (std::size_t r = 1; r < n; ++r) {
      ready_.emplace_back(cudaEventDisableTiming);
      copied_.emplace_back(cudaEventDisableTiming);
    }
    summed_.emplace(cudaEventDisableTiming);
  }

  ~SameDeviceCommunicator() override {
    // The kernel reads device_table_: let the last one finish before the table is freed. (The copies do not
    // read it; the events may be destroyed with records pending, the runtime releases them when they
    // complete.) Never throws.
    if (stepped_) {
      const DeviceGuard guard;
      if (cudaSetDevice(device_) != cudaSuccess || cudaEventSynchronize(summed_->get()) != cudaSuccess)
        static_cast<void>(cudaGetLastError());
    }
  }

  std::string description() const override {
    return fmt::format("in-order sum on {} over {} replica{} (a kernel on replica 0's stream, then copies)",
                       device_name_, replicas_.size(), replicas_.size() == 1 ? "" : "s");
  }

  void all_reduce_gradients(std::span<Replica* const> replicas) override {
    check_same_replicas(replicas, replicas_, "same-device all-reduce");
    for (std::size_t r = 0; r < replicas_.size(); ++r) {
      if (replicas_[r].replica->gradient_buffer() != buffers_[r]) {
        throw std::logic_error(fmt::format("same-device all-reduce: replica {}'s gradient buffer moved", r));
      }
    }
    const std::size_t n = replicas_.size();
    if (n < 2) return;

    const DeviceGuard guard;
    CUDA_CHECK(cudaSetDevice(device_));
    const cudaStream_t root = replicas_[0].stream;
    constexpr std::size_t kBytes = L::kGradCount * sizeof(float);

    // Reduce: replica 0's stream waits for every replica's gradients, then sums them into b_0 in replica
    // order.
    for (std::size_t r = 1; r < n; ++r) {
      ready_[r - 1].record(replicas_[r].stream);
      CUDA_CHECK(cudaStreamWaitEvent(root, ready_[r - 1].get(), 0));
    }
    cuda::sum_in_order(device_table_.data(), static_cast<int>(n), buffers_[0], L::kGradCount, root);
    summed_->record(root);
    stepped_ = true;

    // Broadcast: each other replica copies the sum into its own buffer on its own stream; replica 0's stream
    // waits for those copies before it goes on (see the order of a step above).
    for (std::size_t r = 1; r < n; ++r) {
      const cudaStream_t s = replicas_[r].stream;
      CUDA_CHECK(cudaStreamWaitEvent(s, summed_->get(), 0));
      CUDA_CHECK(cudaMemcpyAsync(buffers_[r], buffers_[0], kBytes, cudaMemcpyDeviceToDevice, s));
      copied_[r - 1].record(s);
      CUDA_CHECK(cudaStreamWaitEvent(root, copied_[r - 1].get(), 0));
    }
  }

  // ZeRO-1's halves. The reduce-scatter: replica 0's stream waits for every replica's gradients, as the
  // all-reduce's does, then one in-order sum per shard into its owner's buffer, and the loss slot's into
  // replica 0's; each other replica's stream waits for the sums, copies the loss slot, and replica 0's
  // waits for those copies before it goes on (its next step overwrites the slot they read). Replica r's
  // sgd_step_shard then runs on its own stream, after the sums. The all-gather: each owner's stream copies
  // its shard of its parameters into every other replica's, after its SGD step; every stream waits for
  // every other's copies before its next step reads its parameters.
  void reduce_scatter_gradients(std::span<Replica* const> replicas, std::span<const Shard> shards) override {
    check_halves(replicas, shards, "same-device reduce-scatter");
    const std::size_t n = replicas_.size();
    if (n < 2) return;
    const DeviceGuard guard;
    CUDA_CHECK(cudaSetDevice(device_));
    const cudaStream_t root = replicas_[0].stream;
    if (shard_tables_.size() == 0) upload_shard_tables(shards);
    for (std::size_t r = 1; r < n; ++r) {
      ready_[r - 1].record(replicas_[r].stream);
      CUDA_CHECK(cudaStreamWaitEvent(root, ready_[r - 1].get(), 0));
    }
    // Table k holds every replica's buffer from shard k's first element; table n, from the loss slot. The
    // sum may write into any of its operands (kernels/cuda/ops/replica_sum.hpp): here its owner's.
    for (std::size_t k = 0; k < n; ++k)
      cuda::sum_in_order(shard_tables_.data() + k * n, static_cast<int>(n), buffers_[k] + shards[k].first,
                         static_cast<std::size_t>(shards[k].count), root);
    cuda::sum_in_order(shard_tables_.data() + n * n, static_cast<int>(n), buffers_[0] + L::kLossSlot, 1,
                       root);
    summed_->record(root);
    stepped_ = true;
    for (std::size_t r = 1; r < n; ++r) {
      const cudaStream_t s = replicas_[r].stream;
      CUDA_CHECK(cudaStreamWaitEvent(s, summed_->get(), 0));
      CUDA_CHECK(cudaMemcpyAsync(buffers_[r] + L::kLossSlot, buffers_[0] + L::kLossSlot, sizeof(float),
                                 cudaMemcpyDeviceToDevice, s));
      copied_[r - 1].record(s);
      CUDA_CHECK(cudaStreamWaitEvent(root, copied_[r - 1].get(), 0));
    }
  }

  void all_gather_parameters(std::span<Replica* const> replicas, std::span<const Shard> shards) override {
    check_halves(replicas, shards, "same-device all-gather");
    const std::size_t n = replicas_.size();
    if (n < 2) return;
    if (parameters_.empty()) {
      for (const DeviceReplica& placed : replicas_)
        parameters_.push_back(placed.replica->parameter_buffer());
      gathered_.clear();
      for (std::size_t r = 0; r < n; ++r)
        gathered_.emplace_back(cudaEventDisableTiming);
    }
    const DeviceGuard guard;
    CUDA_CHECK(cudaSetDevice(device_));
    for (std::size_t owner = 0; owner < n; ++owner) {
      const Shard& s = shards[owner];
      const cudaStream_t stream = replicas_[owner].stream;
      for (std::size_t r = 0; r < n; ++r)
        if (r != owner && s.count > 0)
          CUDA_CHECK(cudaMemcpyAsync(parameters_[r] + s.first, parameters_[owner] + s.first,
                                     static_cast<std::size_t>(s.count) * sizeof(float),
                                     cudaMemcpyDeviceToDevice, stream));
      gathered_[owner].record(stream);
    }
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t owner = 0; owner < n; ++owner)
        if (owner != r) CUDA_CHECK(cudaStreamWaitEvent(replicas_[r].stream, gathered_[owner].get(), 0));
  }

 private:
  void check_halves(std::span<Replica* const> replicas, std::span<const Shard> shards,
                    const char* who) const {
    check_same_replicas(replicas, replicas_, who);
    if (shards.size() != replicas_.size())
      throw std::invalid_argument(
          fmt::format("{}: {} shards for {} replicas", who, shards.size(), replicas_.size()));
    for (std::size_t r = 0; r < replicas_.size(); ++r)
      if (replicas_[r].replica->gradient_buffer() != buffers_[r])
        throw std::logic_error(fmt::format("{}: replica {}'s gradient buffer moved", who, r));
  }

  // The reduce-scatter's tables of operands, [(replicas + 1) x replicas] pointers: uploaded once, as the
  // all-reduce's (the buffers never move, and a run's shards never change).
  void upload_shard_tables(std::span<const Shard> shards) {
    const std::size_t n = replicas_.size();
    std::vector<const float*> tables;
    for (std::size_t k = 0; k <= n; ++k)
      for (std::size_t q = 0; q < n; ++q)
        tables.push_back(buffers_[q] + (k < n ? static_cast<std::size_t>(shards[k].first) : L::kLossSlot));
    shard_tables_ = DeviceBuffer<const float*>(tables.size());
    const cudaStream_t root = replicas_[0].stream;
    CUDA_CHECK(cudaMemcpyAsync(shard_tables_.data(), tables.data(), shard_tables_.bytes(),
                               cudaMemcpyHostToDevice, root));
    CUDA_CHECK(cudaStreamSynchronize(root));  // the host table goes out of scope
  }

  std::vector<DeviceReplica> replicas_;
  std::string device_name_;
  int device_;
  std::vector<float*> buffers_;  // [replicas]: each replica's gradient buffer, [kGradCount]
  // ZeRO-1's: the reduce-scatter's operands, each replica's parameters, and each owner's copies done.
  DeviceBuffer<const float*> shard_tables_;
  std::vector<float*> parameters_;
  std::vector<Event> gathered_;
  DeviceBuffer<const float*>
      device_table_;             // [replicas]: the same pointers, in device memory, for the kernel
  std::vector<Event> ready_;     // [replicas - 1]: replica r's gradients are written (r = 1 ..)
  std::vector<Event> copied_;    // [replicas - 1]: replica r's copy of the sum is written
  std::optional<Event> summed_;  // the sum is in b_0 (made when there are 2 replicas or more)
  bool stepped_ = false;         // summed_ has been recorded
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(std::span<Replica* const> replicas) {
  return std::make_unique<NcclCommunicator>(device_replicas(replicas, "NCCL all-reduce"));
}

std::unique_ptr<Communicator> make_same_device_communicator(std::span<Replica* const> replicas) {
  return std::make_unique<SameDeviceCommunicator>(device_replicas(replicas, "same-device all-reduce"));
}

}  // namespace mnistdp
