#pragma once
// The training loop: the reference program's loop, with the data-parallel steps written out.
//
//   for each epoch: one seeded permutation of the training rows, the same on every replica (made and given to
//   the replicas at the end of the epoch before, while their devices finish its steps)
//     for each global batch of batch_size rows (the last one short): one step of the run's Strategy
//     (host/training/strategy.hpp); the all-reduce's, by default:
//       replica r computes the gradient of its shard, scaled by 1 / global batch   (compute_gradients)
//       the communicator sums the gradient buffers, loss sum included              (all_reduce_gradients)
//       every replica takes the same SGD step with the same summed gradient        (sgd_step)
//
// In a multi-process run (host/processes/process_group.hpp) each process runs this same loop over its own
// replicas: the shards are numbered across the processes (rank by rank), the communicator sums across them,
// and the ranks agree before every step on whether to stop, so that none is left waiting in an all-reduce.
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/processes/process_group.hpp"
#include "host/training/communicator.hpp"
#include "host/training/data_parallel.hpp"
#include "host/training/replica.hpp"
#include "host/training/replica_workers.hpp"
#include "host/training/strategy.hpp"
#include "kernels/ref/activation.hpp"
#include "kernels/ref/sgd.hpp"

namespace mnistdp {

struct TrainConfig {
  int epochs = 5;
  int batch_size = 64;
  // Gradient accumulation (DDP's no_sync): micro-batches of batch_size rows per optimiser step. A step is
  // then accumulate x batch_size rows: the epoch's steps, the loss lines, max_steps, checkpoints and the
  // trace count optimiser steps.
  int accumulate = 1;
  SgdConfig sgd;
  std::uint64_t seed = 0;
  int log_interval = 100;  // a loss line every this many steps (of each epoch), as the reference prints
  long max_steps = 0;      // stop after this many steps in all; 0 runs every epoch to its end
  bool evaluate = true;    // test loss and accuracy after each epoch
  int check_replicas = 0;  // every this many steps, verify that all replicas hold bit-identical parameters
  long trace_steps = 0;    // record the timeline of this many steps from the start (host/training/trace.hpp)
  long start_step = 0;     // steps already done in all (a resumed run); the run continues from the next one
  // The hidden layer's activation (kernels/ref/activation.hpp): the replicas are made with it, a checkpoint
  // records it, and a resumed run keeps the saved one.
  Activation activation = kDefaultActivation;
};

// A loss that is no longer a finite number: the run cannot recover.
class TrainingDiverged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Replicas that stopped holding the same parameters: data parallelism has broken down.
class ReplicaDivergence : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A loss as text that reads the same whatever its sign bit: "nan", "inf", "-inf", or the number.
std::string loss_text(float loss);

struct StepLoss {
  int epoch;
  int step;    // within the epoch
  float loss;  // mean over the global batch
};

struct EpochReport {
  int epoch;
  int steps;
  long samples;
  double seconds;  // the training steps only, evaluation excluded
  EvalResult test;
  bool complete;     // false when max_steps or a stop request cut the epoch short
  long total_steps;  // steps done in all at the end of this epoch
};

// Hooks for whatever shows the run: the console, a metrics file, a test that records the losses.
class TrainListener {
 public:
  virtual ~TrainListener() = default;
  virtual void on_step_loss(const StepLoss&) {}
  // Called after every step; cheap, so it can drive a progress display.
  virtual void on_step(int /*epoch*/, int /*step*/, int /*steps_in_epoch*/) {}
  virtual void on_epoch_end(const EpochReport&) {}
  // The first step found whose loss is not finite, just before the run stops with TrainingDiverged.
  virtual void on_diverged(const StepLoss&) {}
  // Asked before every step; true ends the run after the step in progress (for example on SIGINT).
  virtual bool stop_requested() { return false; }
};

class Trainer {
 public:
  // All replicas get replica 0's parameters at the start (as DistributedDataParallel broadcasts them); with a
  // process group, rank 0's replica 0's. group: null for a single process; else it must outlive the trainer,
  // every rank must have the same number of replicas, and the strategy must run across processes. Only rank
  // 0 evaluates. check_replicas needs a strategy where every replica steps.
  Trainer(std::vector<std::unique_ptr<Replica>> replicas, std::unique_ptr<Strategy> strategy, int train_count,
          TrainConfig config, ProcessGroup* group = nullptr);
  // The all-reduce over `communicator` (make_all_reduce_strategy).
  Trainer(std::vector<std::unique_ptr<Replica>> replicas, std::unique_ptr<Communicator> communicator,
          int train_count, TrainConfig config, ProcessGroup* group = nullptr);
  // nn.DataParallel's algorithm over `links` (make_data_parallel_strategy): device 0's parameters are the
  // run's, copied to the other replicas before each step. One process.
  Trainer(std::vector<std::unique_ptr<Replica>> replicas, std::unique_ptr<DataParallelLinks> links,
          int train_count, TrainConfig config);

  // Runs the configured epochs and returns the report of each.
  std::vector<EpochReport> run(TrainListener& listener);

  // Rows of one optimiser step (the last of an epoch may be short).
  int step_rows() const { return config_.batch_size * config_.accumulate; }
  int steps_per_epoch() const { return (train_count_ + step_rows() - 1) / step_rows(); }
  const std::vector<std::unique_ptr<Replica>>& replicas() const { return replicas_; }
  // Replicas in all processes, and the number of the first of this process's.
  int world_replicas() const { return world_replicas_; }
  int first_replica() const { return first_replica_; }

  // The timeline of the traced steps: [replica][step] marks. Waits for the devices.
  std::vector<std::vector<StepMarks>> take_trace();
  // The strategy's own copies of the traced steps, where it keeps them (DataParallel's links); empty
  // otherwise.
  std::vector<LinkStepMarks> take_link_trace();
  const Strategy& strategy() const { return *strategy_; }
  // The run's momentum, [ParamLayout::kCount] (Strategy::store_momentum): false before any step with it.
  bool store_momentum(std::span<float> momentum) const {
    return strategy_->store_momentum(replica_ptrs_, momentum);
  }
  // The micro-batches of each traced step, in order (write_chrome_trace's micro_batches): empty where a step
  // is one micro-batch (accumulate 1).
  std::vector<int> traced_micro_batches() const;

 private:
  // One optimiser step: rows [first, first + rows) of the epoch's order.
  void step(int first, int rows);

  void broadcast_parameters();
  // Throws ReplicaDivergence naming the first parameter where a replica differs from replica 0 (of rank 0).
  void check_replicas_agree(long step) const;
  // The same for this process's replicas from `first` on, against reference: [ParamLayout::kCount].
  void check_against(std::span<const float> reference, long step, std::size_t first) const;
  // Whether the run stops before the next step: the listener's wish, agreed by every rank.
  bool stop_before_step(TrainListener& listener);
  bool is_root() const { return !group_ || group_->rank() == 0; }
  // When the loss of the given step is NaN or infinite: tells the listener, and throws TrainingDiverged.
  // last_finite: the last step (in all) whose loss was seen finite, -1 for none; when the loss is not read
  // every step, the message says the first bad step lies after it.
  void check_finite(float loss, int epoch, int step, long last_finite, TrainListener& listener) const;
  // The same for the first bad step replica 0 recorded on its device (Replica::first_nonfinite_loss), if any.
  void check_recorded(TrainListener& listener) const;

  std::vector<std::unique_ptr<Replica>> replicas_;
  std::vector<Replica*> replica_ptrs_;
  std::unique_ptr<Strategy> strategy_;
  ReplicaWorkers workers_;
  int train_count_;
  TrainConfig config_;
  ProcessGroup* group_;
  int world_replicas_;
  int first_replica_;
};

}  // namespace mnistdp
