#pragma once
#include <cstddef>

namespace mnistdp {

// The process's resident set size in bytes, from /proc/self/status; 0 where that cannot be read.
std::size_t host_rss_bytes();

}  // namespace mnistdp
