#pragma once
// How the replicas share one step: the data-parallel algorithm. The Trainer runs the loop over epochs and
// batches, and hands each global batch to the one Strategy it holds; each strategy is a file of its own
// (host/command/strategy_table.hpp lists them, with what each needs and how it is made).
//
//   allreduce     each replica its shard's gradient, one all-reduce, every replica steps  (all_reduce.cpp)
//   dataparallel  nn.DataParallel's: device 0 takes the loss, the gradients reduced onto it, and it alone
//                 steps; its parameters copied to the others before each step (data_parallel.cpp)
//   zero1         ZeRO stage 1: the gradients reduce-scattered, each replica steps its shard of the
//                 parameters and keeps that shard's momentum alone, the parameters all-gathered (zero1.cpp)
#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "host/training/communicator.hpp"
#include "host/training/data_parallel.hpp"
#include "host/training/replica.hpp"
#include "host/training/replica_workers.hpp"
#include "host/training/shard.hpp"
#include "host/training/trace.hpp"
#include "kernels/ref/sgd.hpp"

namespace mnistdp {

// What a step works on, the Trainer's: this process's replicas, their threads, and where they stand among the
// replicas of every process (the shards are numbered across the processes, rank by rank).
struct ReplicaSet {
  std::span<Replica* const> replicas;
  ReplicaWorkers& workers;
  int world_replicas = 1;
  int first_replica = 0;  // the number, among all processes' replicas, of replicas[0]
};

// One optimiser step's rows of the epoch's order, [first, first + rows), taken `micro_rows` at a time:
// gradient accumulation (--accumulate K, DDP's no_sync) makes one step of K micro-batches of the batch size,
// their gradients summed on each replica before anything is communicated. Without it, micro_rows is the
// batch size and a step is one micro-batch (the last of an epoch may be short either way).
struct StepRows {
  int first = 0;
  int rows = 0;
  int micro_rows = 1;

  int micro_batches() const { return (rows + micro_rows - 1) / micro_rows; }
  // Micro-batch m's rows, of the epoch's order.
  int micro_first(int m) const { return first + m * micro_rows; }
  int micro_count(int m) const { return std::min(micro_rows, rows - m * micro_rows); }
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // How the replicas' gradients (or parameters) travel: the communicator's or the links' own words.
  virtual std::string description() const = 0;
  // One optimiser step: every replica's part of each micro-batch of `rows`, the gradients of the step's
  // rows (each scaled by 1 / rows.rows), one exchange, one SGD step.
  virtual void step(const ReplicaSet& set, const StepRows& rows, const SgdConfig& sgd) = 0;
  // Waits until the communication of every step so far has finished, and throws if one failed: called
  // before the host reads a result of the replicas.
  virtual void await_completion() {}
  // The run's momentum, [ParamLayout::kCount], for a checkpoint: replica 0's, or, where each replica keeps
  // one shard of it (ZeRO-1), every replica's shard. False, with nothing written, before any step with
  // momentum.
  virtual bool store_momentum(std::span<Replica* const> replicas, std::span<float> momentum) {
    if (!replicas[0]->has_momentum()) return false;
    replicas[0]->store_momentum(momentum);
    return true;
  }
  // Whether every replica holds the run's parameters after each step (so that --check-replicas can compare
  // them), or device 0 alone does.
  virtual bool every_replica_steps() const = 0;
  // Whether the strategy runs across processes (a process group's ranks each holding replicas).
  virtual bool across_processes() const = 0;
  // How the trace names the spans between a step's marks (host/training/trace.hpp).
  virtual TraceStrategy trace_phases() const = 0;
  // The timeline of the strategy's own copies for the next `steps` steps, and its marks; none by default.
  virtual void trace_steps(long /*steps*/) {}
  virtual std::vector<LinkStepMarks> take_link_trace() { return {}; }
};

// The all-reduce (DistributedDataParallel's algorithm): each replica computes its shard's gradient, scaled by
// 1 / the global batch; the communicator sums them into every replica; every replica takes the same SGD step.
// A run's only replica takes its steps whole where it can (Replica::step_alone).
std::unique_ptr<Strategy> make_all_reduce_strategy(std::unique_ptr<Communicator> communicator);

// nn.DataParallel's own (host/training/data_parallel.hpp), over `links`.
std::unique_ptr<Strategy> make_data_parallel_strategy(std::unique_ptr<DataParallelLinks> links);

// ZeRO stage 1 (torch.distributed.optim.ZeroRedundancyOptimizer, DeepSpeed's stage 1) over `communicator`'s
// reduce-scatter and all-gather: one process.
std::unique_ptr<Strategy> make_zero1_strategy(std::unique_ptr<Communicator> communicator);
// ZeRO-1's shards of the flat parameters over `world_replicas` replicas: torch.chunk's sizes of
// ParamLayout::kCount, ceil(kCount / n) each but the last (equal parts, as NCCL's reduce-scatter takes them).
std::vector<Shard> parameter_shards(int world_replicas);

// Replica `index`'s gradient of the step's rows (of this process's replicas; `world_index` its number among
// every process's): its shard of each micro-batch, summed over the micro-batches in their order (the first
// computed into the gradient buffer, each later one added to what was kept), every one scaled by
// 1 / rows.rows. A micro-batch before the last closes the replica's timeline marks without an SGD step.
void compute_step_gradients(Replica& replica, const StepRows& rows, int world_replicas, int world_index);

}  // namespace mnistdp
