#include "host/training/trace.hpp"

#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace mnistdp {

namespace {

struct PhaseBounds {
  const char* name;
  Mark begin;
  Mark end;
};

constexpr PhaseBounds kPhases[] = {
    {"gather", Mark::gather, Mark::forward},       {"forward", Mark::forward, Mark::loss},
    {"loss", Mark::loss, Mark::backward},          {"backward", Mark::backward, Mark::backward_end},
    {"all-reduce", Mark::backward_end, Mark::sgd}, {"sgd", Mark::sgd, Mark::sgd_end},
};

}  // namespace

void write_chrome_trace(const std::filesystem::path& path,
                        const std::vector<std::vector<StepMarks>>& replica_marks,
                        const std::vector<std::string>& names, long first_step) {
  // Times start at the first mark of the run, so the numbers a reader sees are small.
  double origin = 0;
  bool have_origin = false;
  for (const auto& steps : replica_marks)
    for (const StepMarks& m : steps)
      if (!have_origin || m[0] < origin) {
        origin = m[0];
        have_origin = true;
      }

  nlohmann::json events = nlohmann::json::array();
  for (std::size_t r = 0; r < replica_marks.size(); ++r) {
    events.push_back(
        {{"name", "thread_name"},
         {"ph", "M"},
         {"pid", 0},
         {"tid", r},
         {"args", {{"name", fmt::format("replica {} ({})", r, r < names.size() ? names[r] : "?")}}}});
    for (std::size_t step = 0; step < replica_marks[r].size(); ++step) {
      const StepMarks& m = replica_marks[r][step];
      for (const PhaseBounds& p : kPhases) {
        const double begin = m[static_cast<int>(p.begin)] - origin;
        const double end = m[static_cast<int>(p.end)] - origin;
        events.push_back({{"name", p.name},
                          {"cat", "step"},
                          {"ph", "X"},
                          {"pid", 0},
                          {"tid", r},
                          {"ts", begin},
                          {"dur", end > begin ? end - begin : 0.0},
                          {"args", {{"step", first_step + static_cast<long>(step)}}}});
      }
    }
  }
  std::ofstream file(path, std::ios::out | std::ios::trunc);
  if (!file)
    throw std::runtime_error(fmt::format("{}: cannot open the trace file for writing", path.string()));
  file << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ns"}}.dump() << '\n';
  if (!file.flush()) throw std::runtime_error(fmt::format("{}: write failed (disk full?)", path.string()));
}

}  // namespace mnistdp
