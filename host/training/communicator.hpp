#pragma once
// The all-reduce that turns each replica's partial gradient into the global batch's gradient. One call per
// step, on the whole flat gradient buffer (the loss sum included), never one per tensor.
#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "host/processes/process_group.hpp"
#include "host/training/replica.hpp"

namespace mnistdp {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string description() const = 0;
  // Sums the gradient buffers of all replicas, element by element, and leaves the sum in every one of them.
  virtual void all_reduce_gradients(std::span<Replica* const> replicas) = 0;
  // Waits until every all-reduce issued so far has finished, and throws if one failed: called before the
  // host reads a result. Communicators that finish each all-reduce before returning have nothing to do; one
  // that works asynchronously (NCCL across processes) watches it here, with a timeout, instead of letting a
  // lost peer hang the device forever.
  virtual void await_completion() {}
};

// Replica 0's gradient buffer (host memory) becomes the sum of every replica's over its first `count` floats,
// added in replica order: ((b0 + b1) + b2) + ... The host sum of both strategies (host/training/
// data_parallel.hpp).
void sum_into_first(std::span<Replica* const> replicas, std::size_t count);

// For CPU replicas in one process: the sum is taken in replica order, so it is deterministic and every
// replica receives bit-identical values.
std::unique_ptr<Communicator> make_host_communicator();

// For CPU replicas in several processes: the replicas of this process are summed as above, then the group
// sums the processes' results (host/processes/process_group.hpp). The group must outlive the communicator.
std::unique_ptr<Communicator> make_process_group_communicator(ProcessGroup& group);

}  // namespace mnistdp
