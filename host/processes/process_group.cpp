#include "host/processes/process_group.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace mnistdp {

std::string broadcast_string(ProcessGroup& group, const std::string& text) {
  std::uint64_t length = text.size();
  group.broadcast(std::as_writable_bytes(std::span(&length, 1)));
  std::string result = group.rank() == 0 ? text : std::string(length, '\0');
  group.broadcast(std::as_writable_bytes(std::span(result.data(), result.size())));
  return result;
}

namespace {

// The settings as rank 0 wrote them, one "name\tvalue\n" line each.
std::vector<Setting> parse_settings(const std::string& text) {
  std::vector<Setting> settings;
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t tab = text.find('\t', start);
    const std::size_t end = text.find('\n', start);
    if (tab == std::string::npos || end == std::string::npos || tab > end) break;
    settings.push_back({text.substr(start, tab - start), text.substr(tab + 1, end - tab - 1)});
    start = end + 1;
  }
  return settings;
}

}  // namespace

void require_same_on_all_ranks(ProcessGroup& group, const std::vector<Setting>& settings) {
  // One line per setting, so that a rank that differs can name the first setting it differs in.
  std::string mine;
  for (const Setting& s : settings)
    mine += fmt::format("{}\t{}\n", s.name, s.value);
  const std::string root = broadcast_string(group, mine);
  const bool differs = root != mine;
  if (!group.any(differs)) return;
  const std::vector<Setting> roots = parse_settings(root);
  // Where this rank first differs: a setting's index, settings.size() for a different number of settings.
  std::size_t first = settings.size();
  for (std::size_t i = 0; differs && i < settings.size(); ++i) {
    if (i >= roots.size() || roots[i].name != settings[i].name || roots[i].value != settings[i].value) {
      first = i;
      break;
    }
  }
  // Every rank learns where each rank first differs (0: it does not; i + 1: at setting i), so that rank 0
  // and the ranks that agree with it name the setting too. Whole numbers this small add exactly as floats.
  std::vector<float> where(static_cast<std::size_t>(group.size()), 0.0f);
  if (differs) where[static_cast<std::size_t>(group.rank())] = static_cast<float>(first + 1);
  group.all_reduce_sum(where);
  if (differs) {
    if (first < settings.size()) {
      const std::string theirs =
          first < roots.size() && roots[first].name == settings[first].name ? roots[first].value : "?";
      throw std::runtime_error(
          fmt::format("rank {} and rank 0 differ in {}: rank {} has {}, rank 0 has {}; every rank must be "
                      "started with the same options and data",
                      group.rank(), settings[first].name, group.rank(), settings[first].value, theirs));
    }
    throw std::runtime_error(
        fmt::format("rank {} and rank 0 differ in the number of settings ({} and {}); every rank must be "
                    "started with the same options and data (and the same mnist-dp)",
                    group.rank(), settings.size(), roots.size()));
  }
  int first_rank = -1, ranks = 0;
  for (std::size_t r = 0; r < where.size(); ++r) {
    if (where[r] == 0.0f) continue;
    if (first_rank < 0) first_rank = static_cast<int>(r);
    ++ranks;
  }
  const auto index = static_cast<std::size_t>(where[static_cast<std::size_t>(first_rank)]) - 1;
  const std::string what = index < roots.size()
                               ? fmt::format("{} (rank 0 has {}; rank {} says what it has)",
                                             roots[index].name, roots[index].value, first_rank)
                               : std::string("the number of settings");
  throw std::runtime_error(fmt::format(
      "rank {} differs from rank 0 in {}{}; every rank must be started with the same options and data",
      first_rank, what,
      ranks > 1 ? fmt::format(", and {} more rank{} differ", ranks - 1, ranks > 2 ? "s" : "")
                : std::string()));
}

}  // namespace mnistdp
