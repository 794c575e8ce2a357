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

void require_same_on_all_ranks(ProcessGroup& group, const std::vector<Setting>& settings) {
  // One line per setting, so that a rank that differs can name the first setting it differs in.
  std::string mine;
  for (const Setting& s : settings)
    mine += fmt::format("{}\t{}\n", s.name, s.value);
  const std::string root = broadcast_string(group, mine);
  const bool differs = root != mine;
  if (!group.any(differs)) return;
  if (differs) {
    std::vector<Setting> roots;
    for (std::size_t start = 0; start < root.size();) {
      const std::size_t tab = root.find('\t', start);
      const std::size_t end = root.find('\n', start);
      if (tab == std::string::npos || end == std::string::npos || tab > end) break;
      roots.push_back({root.substr(start, tab - start), root.substr(tab + 1, end - tab - 1)});
      start = end + 1;
    }
    for (std::size_t i = 0; i < settings.size(); ++i) {
      const std::string theirs = i < roots.size() && roots[i].name == settings[i].name ? roots[i].value : "?";
      if (theirs != settings[i].value)
        throw std::runtime_error(
            fmt::format("rank {} and rank 0 differ in {}: rank {} has {}, rank 0 has {}; every rank must be "
                        "started with the same options and data",
                        group.rank(), settings[i].name, group.rank(), settings[i].value, theirs));
    }
    throw std::runtime_error(
        fmt::format("rank {} and rank 0 differ in the number of settings ({} and {}); every rank must be "
                    "started with the same options and data (and the same mnist-dp)",
                    group.rank(), settings.size(), roots.size()));
  }
  throw std::runtime_error(
      "the ranks differ in the run's settings (the ranks that differ from rank 0 name the setting); every "
      "rank must be started with the same options and data");
}

}  // namespace mnistdp
