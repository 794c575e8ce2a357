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
  // Every rank learns where each rank first differs (0: it does not; i + 1: at setting i), and then the value
  // the lowest of them has there, so that every rank's message names the same setting and both values. Whole
  // numbers this small (indices, bytes) add exactly as floats.
  std::vector<float> where(static_cast<std::size_t>(group.size()), 0.0f);
  if (differs) where[static_cast<std::size_t>(group.rank())] = static_cast<float>(first + 1);
  group.all_reduce_sum(where);
  int first_rank = -1, ranks = 0;
  for (std::size_t r = 0; r < where.size(); ++r) {
    if (where[r] == 0.0f) continue;
    if (first_rank < 0) first_rank = static_cast<int>(r);
    ++ranks;
  }
  const auto index = static_cast<std::size_t>(where[static_cast<std::size_t>(first_rank)]) - 1;
  constexpr std::size_t kLongestValue = 512;
  // [0]: 0 when that rank has no setting of rank 0's name there, else 1 + the value's length; then its bytes.
  std::vector<float> value(kLongestValue + 1, 0.0f);
  if (group.rank() == first_rank && index < settings.size() && index < roots.size() &&
      settings[index].name == roots[index].name) {
    const std::string& v = settings[index].value;
    const std::size_t n = std::min(v.size(), kLongestValue);
    value[0] = static_cast<float>(n + 1);
    for (std::size_t i = 0; i < n; ++i)
      value[i + 1] = static_cast<float>(static_cast<unsigned char>(v[i]));
  }
  group.all_reduce_sum(value);
  const bool named = value[0] > 0.0f;
  std::string theirs(named ? static_cast<std::size_t>(value[0]) - 1 : 0, '\0');
  for (std::size_t i = 0; i < theirs.size(); ++i)
    theirs[i] = static_cast<char>(static_cast<unsigned char>(value[i + 1]));
  const std::string others =
      ranks > 1 ? fmt::format(" (and {} more rank{})", ranks - 1, ranks > 2 ? "s" : "") : std::string();
  if (!named)
    throw std::runtime_error(fmt::format(
        "rank {}{} and rank 0 differ in their settings' number or names (rank 0 has {}); every rank "
        "must be started with the same options and data (and the same mnist-dp)",
        first_rank, others, roots.size()));
  throw std::runtime_error(fmt::format(
      "rank {}{} and rank 0 differ in {}: rank {} has {}, rank 0 has {}; every rank must be started with the "
      "same options and data",
      first_rank, others, roots[index].name, first_rank, theirs, roots[index].value));
}

}  // namespace mnistdp
