#pragma once
// A machine-readable record of the run, one JSON object per line (JSON Lines), for plots and notebooks:
//   {"event":"start", ...the configuration...}
//   {"event":"step","epoch":0,"step":100,"loss":0.53}
//   {"event":"epoch","epoch":0,"steps":938,"seconds":0.51,"test_loss":0.45,"test_accuracy":0.83}
//   {"event":"diverged","epoch":0,"step":249,"loss":"nan"}   the first step whose loss is not finite (JSON
//   has
//                                                             no NaN or infinity, so the value is a string)
#include <filesystem>
#include <fstream>
#include <string>

#include "host/training/trainer.hpp"

namespace mnistdp {

class MetricsWriter final : public TrainListener {
 public:
  // start_record: a JSON object (as text) describing the run, written first with "event":"start" added.
  MetricsWriter(const std::filesystem::path& path, const std::string& start_record);

  void on_step_loss(const StepLoss& s) override;
  void on_epoch_end(const EpochReport& r) override;
  void on_diverged(const StepLoss& s) override;

 private:
  void write_line(const std::string& line);

  std::filesystem::path path_;
  std::ofstream file_;
};

}  // namespace mnistdp
