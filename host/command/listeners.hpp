#pragma once
// Several listeners heard as one, in the order given.
#include <vector>

#include "host/training/trainer.hpp"

namespace mnistdp {

class Listeners final : public TrainListener {
 public:
  // Null entries (a listener that is not wanted in this run) are left out.
  explicit Listeners(const std::vector<TrainListener*>& all) {
    for (TrainListener* l : all)
      if (l) all_.push_back(l);
  }
  void on_step_loss(const StepLoss& s) override {
    for (auto* l : all_)
      l->on_step_loss(s);
  }
  void on_step(int epoch, int step, int steps) override {
    for (auto* l : all_)
      l->on_step(epoch, step, steps);
  }
  void on_epoch_end(const EpochReport& r) override {
    for (auto* l : all_)
      l->on_epoch_end(r);
  }
  void on_diverged(const StepLoss& s) override {
    for (auto* l : all_)
      l->on_diverged(s);
  }
  bool stop_requested() override {
    for (auto* l : all_)
      if (l->stop_requested()) return true;
    return false;
  }

 private:
  std::vector<TrainListener*> all_;
};

}  // namespace mnistdp
