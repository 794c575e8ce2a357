#pragma once
// The all-reduce that turns each replica's partial gradient into the global batch's gradient. One call per
// step, on the whole flat gradient buffer (the loss sum included), never one per tensor.
#include <memory>
#include <span>
#include <string>

#include "host/replica.hpp"

namespace mnistdp {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string description() const = 0;
  // Sums the gradient buffers of all replicas, element by element, and leaves the sum in every one of them.
  virtual void all_reduce_gradients(std::span<Replica* const> replicas) = 0;
};

// For CPU replicas in one process: the sum is taken in replica order, so it is deterministic and every
// replica receives bit-identical values.
std::unique_ptr<Communicator> make_host_communicator();

}  // namespace mnistdp
