#pragma once
// What every benchmark shares that needs no GPU: summarising repeated timings, and describing when and under
// what load they were taken for the JSON output. Built in every configuration (mnistdp_bench_stats), so that
// the CPU-only benchmarks use it too; bench_common.hpp includes it for the GPU ones.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mnistdp::bench {

// Microseconds per launch over the repeats.
struct Stats {
  double median = 0.0;
  double p10 = 0.0;
  double p90 = 0.0;
  double min = 0.0;
  double max = 0.0;
  int repeats = 0;
  long launches = 0;  // launches in each timing
};

// Sorts `us` (one value per repeat, microseconds per launch) and summarises it.
Stats summarize(std::vector<double> us, long launches);
// The same timings per one of the `per_launch` operations each launch does (the times divided by it).
Stats per_operation(const Stats& s, double per_launch);
// median_us, p10_us, p90_us, min_us, max_us, repeats and, with with_launches, launches_per_timing (a
// benchmark whose every timing is one operation leaves it out).
nlohmann::json to_json(const Stats& s, bool with_launches = true);

// "2026-11-30T01:23:45Z"
std::string utc_now();
// The host's load average over the last minute (from /proc/loadavg; -1 when unreadable).
double load_average();
// Writes `j` to `path`, indented; throws std::runtime_error naming the file on failure.
void write_json(const std::string& path, const nlohmann::json& j);

}  // namespace mnistdp::bench
