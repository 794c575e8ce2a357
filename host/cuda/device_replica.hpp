#pragma once
// A replica whose gradient buffer is device memory, as the CUDA communicators see it: through the Replica
// interface (Replica::device_place), whatever the replica's class.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstddef>
#include <span>
#include <stdexcept>
#include <vector>

#include "host/training/replica.hpp"

namespace mnistdp {

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
