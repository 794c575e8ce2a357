#include "host/command/memory_usage.hpp"

#include <fstream>
#include <string>

namespace mnistdp {

std::size_t host_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      std::size_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
    status.ignore(4096, '\n');
  }
  return 0;
}

}  // namespace mnistdp
