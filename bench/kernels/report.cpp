// Runner: the table as the rows come, and the JSON of the whole run.
#include "bench/kernels/runner.hpp"

namespace mnistdp::bench {

void Runner::print_header() const {
  if (opt_.check_only) {
    fmt::print("{:<34} {:<24} {:<12} {:<18}  {}\n", "benchmark", "shape", "impl", "launched, untimed",
               "check");
    return;
  }
  fmt::print("{:<34} {:<24} {:<12} {:>22} {:>9} {:>9} {:>9} {:>8} {:>6} {:>6} {:>6}  {}\n", "benchmark",
             "shape", "impl", "hot us (p10-p90)", "cold us", "graph us", "GFLOP/s", "GB/s", "%peak", "%bw",
             "xlaunch", "check");
}

nlohmann::json Runner::json(const Options& o) const {
  nlohmann::json rows = nlohmann::json::array();
  for (const Result& r : results_) {
    nlohmann::json j{{"id", r.group + "/" + r.op + "/" + r.impl},
                     {"group", r.group},
                     {"op", r.op},
                     {"impl", r.impl},
                     {"shape", r.shape},
                     {"flops", r.work.flops},
                     {"bytes", r.work.bytes},
                     {"launches", r.work.launches},
                     {"check", r.check},
                     {"error_over_tolerance", r.error_ratio}};
    auto mode = [&](const char* name, const std::optional<Stats>& st, double floor_us) {
      if (!st) return;
      nlohmann::json m = to_json(*st);
      m["gflops"] = r.work.flops / (st->median * 1e3);
      m["gbs"] = r.work.bytes / (st->median * 1e3);
      m["fraction_of_peak_flops"] = m["gflops"].get<double>() / ceil_.sgemm_gflops;
      m["fraction_of_copy_bandwidth"] = m["gbs"].get<double>() / ceil_.copy_gbs;
      m["times_launch_floor"] = st->median / (r.work.launches * floor_us);
      if (std::string(name) == "cold") m["buffer_sets"] = r.cold_sets;
      j[name] = m;
    };
    mode("hot", r.hot, ceil_.empty_stream.median);
    mode("cold", r.cold, ceil_.empty_stream.median);
    mode("graph", r.graph, ceil_.empty_graph.median);
    if (o.check_only) j["launched"] = r.launched;
    rows.push_back(j);
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  if (o.check_only)
    return {{"program", kProgram},
            {"check_only", true},
            {"emulated", devices_emulated()},
            {"date", utc_now()},
            {"host", host},
            {"device", device_json(device_)},
            {"options", {{"quick", o.quick}, {"filter", o.filter}}},
            {"method",
             "check only: every row checked against the CPU reference, then each of its modes launched as "
             "few times as the timing allows; nothing timed"},
            {"rows", rows}};
  return {
      {"program", kProgram},
      {"check_only", false},
      {"date", utc_now()},
      {"host", host},
      {"load_average_1min", load_average()},
      {"device", device_json(device_)},
      {"options", {{"quick", o.quick}, {"filter", o.filter}, {"repeats", timing_.repeats}}},
      {"method",
       "median over repeats of (CUDA event time of N back-to-back launches) / N; hot: one buffer set; "
       "cold: buffer sets rotated, more than twice the L2 in all; graph: the N launches captured in one "
       "CUDA graph. Rates from the hot time, or the cold one when there is no hot."},
      {"ceilings",
       {{"sgemm",
         {{"n", ceil_.sgemm_n},
          {"math", "CUBLAS_PEDANTIC_MATH"},
          {"gflops", ceil_.sgemm_gflops},
          {"timing", to_json(ceil_.sgemm)}}},
        {"copy",
         {{"bytes", ceil_.copy_bytes},
          {"gbs_read_plus_write", ceil_.copy_gbs},
          {"timing", to_json(ceil_.copy)}}},
        {"empty_kernel",
         {{"stream", to_json(ceil_.empty_stream)},
          {"graph", to_json(ceil_.empty_graph)},
          {"launch_and_sync_host_clock", to_json(ceil_.empty_sync)}}},
        {"grid_barrier",
         {{"blocks", ceil_.grid_barrier_blocks},
          {"threads_per_block", 256},
          {"barriers_per_launch", kGridBarriers},
          {"per_barrier", ceil_.grid_barrier_error.empty() ? to_json(ceil_.grid_barrier)
                                                           : nlohmann::json(ceil_.grid_barrier_error)}}}}},
      {"persistent_phases", persistent_phases_},
      {"rows", rows}};
}

bool Runner::all_ok() const {
  return std::all_of(results_.begin(), results_.end(), [](const Result& r) { return r.check == "ok"; });
}

void Runner::print_row(const Result& r) {
  if (r.group != last_group_) {
    fmt::print("\n");
    last_group_ = r.group;
  }
  if (opt_.check_only) {
    // The modes launched in place of their times; "checked" where a timed run would say "ok".
    const std::string launched = r.launched.empty() ? "-" : fmt::format("{}", fmt::join(r.launched, ", "));
    fmt::print("{:<34} {:<24} {:<12} {:<18}  {}\n", r.group + "/" + r.op, r.shape, r.impl, launched,
               r.check == "ok" ? "checked" : r.check);
    std::fflush(stdout);
    return;
  }
  const std::optional<Stats>& rate = r.hot ? r.hot : r.cold;
  auto us = [](const std::optional<Stats>& st) { return st ? fmt::format("{:.2f}", st->median) : "-"; };
  std::string hot = "-";
  if (r.hot) hot = fmt::format("{:.2f} ({:.2f}-{:.2f})", r.hot->median, r.hot->p10, r.hot->p90);
  std::string gflops = "-", gbs = "-", peak = "-", bw = "-", floor = "-";
  if (rate) {
    const double gf = r.work.flops / (rate->median * 1e3), gb = r.work.bytes / (rate->median * 1e3);
    gflops = fmt::format("{:.1f}", gf);
    gbs = fmt::format("{:.1f}", gb);
    peak = fmt::format("{:.1f}", 100.0 * gf / ceil_.sgemm_gflops);
    bw = fmt::format("{:.1f}", 100.0 * gb / ceil_.copy_gbs);
    floor = fmt::format("{:.1f}", rate->median / (r.work.launches * ceil_.empty_stream.median));
  }
  std::string check = r.check;
  if (check.size() > 90) check = check.substr(0, 87) + "...";
  fmt::print("{:<34} {:<24} {:<12} {:>22} {:>9} {:>9} {:>9} {:>8} {:>6} {:>6} {:>6}  {}\n",
             r.group + "/" + r.op, r.shape, r.impl, hot, us(r.cold), us(r.graph), gflops, gbs, peak, bw,
             floor, check);
  std::fflush(stdout);
}

}  // namespace mnistdp::bench
