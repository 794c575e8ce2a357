#include "host/command/metrics.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace mnistdp {

MetricsWriter::MetricsWriter(const std::filesystem::path& path, const std::string& start_record)
    : path_(path), file_(path, std::ios::out | std::ios::trunc) {
  if (!file_)
    throw std::runtime_error(fmt::format("{}: cannot open the metrics file for writing", path.string()));
  nlohmann::json start = nlohmann::json::parse(start_record);
  start["event"] = "start";
  write_line(start.dump());
}

void MetricsWriter::write_line(const std::string& line) {
  // Flushed per line: a run that dies still leaves every record written so far.
  file_ << line << '\n' << std::flush;
  if (!file_) throw std::runtime_error(fmt::format("{}: write failed (disk full?)", path_.string()));
}

void MetricsWriter::on_step_loss(const StepLoss& s) {
  write_line(
      nlohmann::json{{"event", "step"}, {"epoch", s.epoch}, {"step", s.step}, {"loss", s.loss}}.dump());
}

void MetricsWriter::on_diverged(const StepLoss& s) {
  write_line(
      nlohmann::json{{"event", "diverged"}, {"epoch", s.epoch}, {"step", s.step}, {"loss", loss_text(s.loss)}}
          .dump());
}

void MetricsWriter::on_epoch_end(const EpochReport& r) {
  nlohmann::json record{{"event", "epoch"},     {"epoch", r.epoch},     {"steps", r.steps},
                        {"samples", r.samples}, {"seconds", r.seconds}, {"complete", r.complete}};
  if (r.test.count > 0) {
    record["test_loss"] = r.test.mean_loss();
    record["test_accuracy"] = r.test.accuracy();
  }
  write_line(record.dump());
}

}  // namespace mnistdp
