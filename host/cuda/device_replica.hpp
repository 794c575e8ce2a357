#pragma once
// A replica whose gradient buffer is device memory, as the CUDA communicators and DataParallel's copies see
// it: through the Replica interface (Replica::device_place), whatever the replica's class; and DeviceGuard,
// with which they leave the calling thread's current device as they found it.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstddef>
#include <span>
#include <stdexcept>
#include <vector>

#include "host/training/replica.hpp"

namespace mnistdp {

// Restores the calling thread's current device on scope exit, so that a communicator leaves no trace of the
// devices it visited. Never throws: a failure to read or restore the device is dropped, and the runtime's
// last-error state cleared, so that it cannot surface later in some unrelated CUDA_CHECK_LAUNCH.
class DeviceGuard {
 public:
  DeviceGuard() {
    if (cudaGetDevice(&saved_) != cudaSuccess) {
      saved_ = -1;
      static_cast<void>(cudaGetLastError());
    }
  }
  ~DeviceGuard() {
    if (saved_ >= 0 && cudaSetDevice(saved_) != cudaSuccess) static_cast<void>(cudaGetLastError());
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int saved_ = -1;
};

struct DeviceReplica {
  Replica* replica = nullptr;
  int device = 0;                 // where its gradient buffer lives
  cudaStream_t stream = nullptr;  // what its launches are ordered on
};

// `replica` with its place, or std::invalid_argument naming it when its buffer is not device memory.
// position: its index in the communicator's list, for the message.
inline DeviceReplica device_replica(Replica* replica, std::size_t position, const char* who) {
  if (!replica) throw std::invalid_argument(fmt::format("{}: replica {} is null", who, position));
  const auto place = replica->device_place();
  if (!place) {
    throw std::invalid_argument(
        fmt::format("{}: replica {} ({}) is not a CUDA replica", who, position, replica->description()));
  }
  return {replica, place->device, place->stream};
}

// Every replica with its place, or std::invalid_argument naming the first that is not on a device.
inline std::vector<DeviceReplica> device_replicas(std::span<Replica* const> replicas, const char* who) {
  if (replicas.empty()) throw std::invalid_argument(fmt::format("{}: no replicas", who));
  std::vector<DeviceReplica> placed;
  placed.reserve(replicas.size());
  for (std::size_t r = 0; r < replicas.size(); ++r)
    placed.push_back(device_replica(replicas[r], r, who));
  return placed;
}

}  // namespace mnistdp
