#pragma once
// The listener that saves the run: a checkpoint after every epoch (and after a stopped one), with the run's
// settings in its metadata so that --resume goes on with them.
#include <cstdint>

#include "host/command/cli.hpp"
#include "host/command/stop_signals.hpp"
#include "host/training/trainer.hpp"
#include "mnist_io/dataset.hpp"

namespace mnistdp {

// Saves a checkpoint after every epoch (and after a stopped one), and turns SIGINT, SIGTERM, SIGHUP and
// SIGPIPE into a stop request. writes: false on the ranks other than 0, which stop with the others but save
// nothing.
class CheckpointListener final : public TrainListener {
 public:
  CheckpointListener(const TrainOptions& o, const TrainConfig& t, const DataSplits& data,
                     const Trainer& trainer, StopSignals& signals, bool writes)
      : o_(o),
        t_(t),
        fingerprint_(fingerprint(data.train)),
        trainer_(trainer),
        signals_(signals),
        writes_(writes) {}

  bool stop_requested() override { return signals_.requested(); }
  void on_epoch_end(const EpochReport& r) override;

  // The step after which the last checkpoint was saved; -1 before the first.
  long saved_step() const { return saved_step_; }

 private:
  const TrainOptions& o_;
  const TrainConfig& t_;
  std::uint64_t fingerprint_;
  const Trainer& trainer_;
  StopSignals& signals_;
  bool writes_;
  long saved_step_ = -1;
};

}  // namespace mnistdp
