#pragma once
// How the parts of checkpoint/ word a CheckpointError: the file's path first, then the problem, with
// anything taken from the file itself shown so that it cannot garble the message.
#include <fmt/format.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "host/checkpoint/checkpoint.hpp"

namespace mnistdp {

// Names and values from a file can hold anything; messages show them escaped and cut short.
inline std::string printable(std::string_view text, std::size_t limit = 64) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < limit; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += static_cast<char>(c);
  }
  if (text.size() > limit) out += fmt::format("... ({} bytes)", text.size());
  return out;
}

// Throws CheckpointError("NAME: problem").
template <typename... Args>
[[noreturn]] void fail(std::string_view name, fmt::format_string<Args...> format, Args&&... args) {
  throw CheckpointError(fmt::format("{}: {}", name, fmt::format(format, std::forward<Args>(args)...)));
}

}  // namespace mnistdp
