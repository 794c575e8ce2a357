#pragma once
// nn.DataParallel's own algorithm (--strategy dataparallel), beside the all-reduce the trainer runs by
// default. Device 0 (replica 0) holds the only parameters that last from step to step; every step:
//
//   replicate       replica 0's parameters copied to every other replica          (links: broadcast)
//   scatter         the batch's rows split as torch.chunk splits them             (shard_of)
//   parallel_apply  each replica's forward pass over its rows, to the logits      (forward_logits)
//   gather          the logits and labels of every shard, onto device 0           (links: gather)
//   loss            device 0 takes the whole batch's loss and its d(logits)       (replica 0: batch_loss)
//   backward        d(logits) scattered back; each replica's backward pass        (links: scatter,
//                                                                                 backward_from_dlogits)
//   reduce          the gradients summed onto device 0, in replica order         (links: reduce)
//   optimiser       SGD on device 0 alone                                          (replica 0: sgd_step)
//
// The all-reduce's step differs in where the loss is taken (each replica its own shard's) and in who steps
// (every replica, from the same summed gradient). Each row's d(logits) is the same function of the same
// logits either way, and the reduction adds the replicas' gradients in the same order as the host sum, so the
// parameters are the all-reduce's to the bit where the gradients are summed in that order (CPU replicas,
// and the same-device sum); the loss sum, added over all rows at once instead of shard by shard, may differ
// in its last bits (docs/how-dataparallel-works.md).
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "host/training/replica.hpp"
#include "host/training/shard.hpp"
#include "host/training/trace.hpp"

namespace mnistdp {

// The copies DataParallel makes between device 0 and the other replicas, each ordered after what writes
// what it reads: memcpy between CPU replicas, device copies between GPUs (host/cuda/cuda_data_parallel.hpp).
// Made for one list of replicas, which must outlive it.
class DataParallelLinks {
 public:
  virtual ~DataParallelLinks() = default;
  virtual std::string description() const = 0;
  // Replica 0's parameters into every other replica's.
  virtual void broadcast_parameters() = 0;
  // Each replica's logits and labels of its shard into device 0's batch buffers, at the shard's rows; then
  // the batch's loss and d(logits) on device 0 (replica 0's batch_loss over `rows` rows, d(logits) scaled
  // by 1 / global_batch).
  virtual void gather_and_take_loss(std::span<const Shard> shards, int rows, int global_batch) = 0;
  // Each replica's rows of the batch's d(logits) into its own buffer.
  virtual void scatter_dlogits(std::span<const Shard> shards) = 0;
  // The replicas' parameter gradients added into replica 0's, in replica order (its loss slot kept).
  virtual void reduce_gradients() = 0;

  // The timeline of the copies (host/training/trace.hpp) of the next `steps` steps, and its marks; links
  // that keep none return none.
  virtual void trace_steps(long /*steps*/) {}
  virtual std::vector<LinkStepMarks> take_trace() { return {}; }
};

// For CPU replicas (host memory): the copies are memcpy, the sum the host communicator's loop.
std::unique_ptr<DataParallelLinks> make_host_data_parallel_links(std::span<Replica* const> replicas);

// The step itself is a Strategy (make_data_parallel_strategy, host/training/strategy.hpp).

}  // namespace mnistdp
