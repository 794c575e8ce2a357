#pragma once
// The all-reduce that turns each replica's partial gradient into the global batch's gradient. One call per
// step, on the whole flat gradient buffer (the loss sum included), never one per tensor.
#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "host/processes/process_group.hpp"
#include "host/training/replica.hpp"
#include "host/training/shard.hpp"

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

  // ZeRO-1's two halves of the all-reduce (--strategy zero1), over `shards` of the parameters, one per
  // replica (of every process, in order; shard_of over ParamLayout::kCount). reduce_scatter_gradients leaves
  // in replica r's gradient buffer, over its shard, the sum of every replica's buffer there, added in replica
  // order as all_reduce_gradients adds, and in every replica's loss slot the sum of the loss slots; the rest
  // of each buffer is left as it was. all_gather_parameters copies each replica's parameters over its shard
  // into every other replica's (Replica::parameter_buffer). A communicator without them throws
  // std::logic_error.
  virtual void reduce_scatter_gradients(std::span<Replica* const> replicas, std::span<const Shard> shards);
  virtual void all_gather_parameters(std::span<Replica* const> replicas, std::span<const Shard> shards);
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
