#include "host/process_group.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>

namespace mnistdp {

std::string broadcast_string(ProcessGroup& group, const std::string& text) {
  std::uint64_t length = text.size();
  group.broadcast(std::as_writable_bytes(std::span(&length, 1)));
  std::string result = group.rank() == 0 ? text : std::string(length, '\0');
  group.broadcast(std::as_writable_bytes(std::span(result.data(), result.size())));
  return result;
}

void require_same_on_all_ranks(ProcessGroup& group, const std::string& what, const std::string& value) {
  const std::string root = broadcast_string(group, value);
  const bool differs = root != value;
  if (!group.any(differs)) return;
  if (differs)
    throw std::runtime_error(
        fmt::format("rank {} and rank 0 differ in {}: rank {} has {}, rank 0 has {}; "
                    "every rank must be started with the same options and data",
                    group.rank(), what, group.rank(), value, root));
  throw std::runtime_error(
      fmt::format("the ranks differ in {} (the ranks that differ from rank 0 name "
                  "themselves); every rank must be started with the same options and "
                  "data",
                  what));
}

}  // namespace mnistdp
