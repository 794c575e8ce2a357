#include "bench/bench_stats.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <ctime>
#include <fstream>
#include <stdexcept>

namespace mnistdp::bench {

Stats summarize(std::vector<double> us, long launches) {
  Stats s;
  s.repeats = static_cast<int>(us.size());
  s.launches = launches;
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  // The nearest-rank percentile: an actual measurement, not an interpolation between two.
  auto rank = [&](double q) {
    const auto i = static_cast<std::size_t>(std::ceil(q * static_cast<double>(us.size())));
    return us[std::min(i == 0 ? 0 : i - 1, us.size() - 1)];
  };
  const std::size_t n = us.size();
  s.median = n % 2 ? us[n / 2] : 0.5 * (us[n / 2 - 1] + us[n / 2]);
  s.p10 = rank(0.10);
  s.p90 = rank(0.90);
  s.min = us.front();
  s.max = us.back();
  return s;
}

Stats per_operation(const Stats& s, double per_launch) {
  Stats out = s;
  for (double* t : {&out.median, &out.p10, &out.p90, &out.min, &out.max})
    *t /= per_launch;
  return out;
}

nlohmann::json to_json(const Stats& s, bool with_launches) {
  nlohmann::json j{{"median_us", s.median}, {"p10_us", s.p10}, {"p90_us", s.p90},
                   {"min_us", s.min},       {"max_us", s.max}, {"repeats", s.repeats}};
  if (with_launches) j["launches_per_timing"] = s.launches;
  return j;
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double one = -1.0;
  if (!(in >> one)) return -1.0;
  return one;
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path, std::ios::out | std::ios::trunc);
  if (!out) throw std::runtime_error(fmt::format("{}: cannot open for writing", path));
  out << j.dump(2) << '\n';
  if (!out.flush()) throw std::runtime_error(fmt::format("{}: write failed", path));
}

}  // namespace mnistdp::bench
