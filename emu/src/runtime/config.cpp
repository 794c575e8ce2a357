#include "emu/src/runtime/config.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace mnistdp::emu {
namespace {

long read_number(const char* name, long fallback, long lo, long hi) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < lo || value > hi) {
    throw std::runtime_error(std::string(name) + "='" + text + "' is not a whole number from " +
                             std::to_string(lo) + " to " + std::to_string(hi));
  }
  return value;
}

Config read_config() {
  Config c;
  c.devices = static_cast<int>(read_number("MNISTDP_EMU_DEVICES", 1, 0, 64));
  c.sms = static_cast<int>(read_number("MNISTDP_EMU_SMS", 8, 1, 1024));
  c.seed = static_cast<std::uint64_t>(read_number("MNISTDP_EMU_SEED", 1, 0, 1L << 62));
  c.failing_device = static_cast<int>(read_number("MNISTDP_EMU_FAILING_DEVICE", -1, -1, 64));
  c.block_races = read_number("MNISTDP_EMU_BLOCK_RACES", 0, 0, 1) == 1;
#if !defined(MNISTDP_EMU_BLOCK_RACES)
  if (c.block_races)
    throw std::runtime_error(
        "MNISTDP_EMU_BLOCK_RACES=1 needs a build with the CMake option MNISTDP_EMU_BLOCK_RACES=ON (preset "
        "emu-asan), whose kernels report their accesses");
#endif
  if (const char* order = std::getenv("MNISTDP_EMU_ORDER"); order && *order) {
    const std::string o = order;
    if (o == "adversarial") {
      c.order = Order::adversarial;
    } else if (o == "in-order") {
      c.order = Order::in_order;
    } else {
      throw std::runtime_error("MNISTDP_EMU_ORDER='" + o + "' is neither 'adversarial' nor 'in-order'");
    }
  }
  if (const char* pdl = std::getenv("MNISTDP_EMU_PDL"); pdl && *pdl) {
    const std::string p = pdl;
    if (p != "overlap" && p != "serial")
      throw std::runtime_error("MNISTDP_EMU_PDL='" + p + "' is neither 'overlap' nor 'serial'");
    c.programmatic_overlap = p == "overlap";
  }
  return c;
}

}  // namespace

NcclConfig nccl_config() {
  NcclConfig c;
  c.max_polls = static_cast<int>(read_number("MNISTDP_EMU_NCCL_POLLS", 3, 0, 1000000));
  const char* fail = std::getenv("MNISTDP_EMU_NCCL_FAIL");
  if (!fail || !*fail) return c;
  const std::string text = fail;
  const auto malformed = [&] {
    return std::runtime_error("MNISTDP_EMU_NCCL_FAIL='" + text +
                              "' is not CALL:N:RESULT, CALL one of ncclCommInitRankConfig, ncclAllReduce, "
                              "ncclCommFinalize, N from 1, RESULT one of ncclSystemError, ncclInternalError, "
                              "ncclRemoteError, hang");
  };
  const std::size_t first = text.find(':');
  const std::size_t second = first == std::string::npos ? first : text.find(':', first + 1);
  if (second == std::string::npos) throw malformed();
  c.fail_call = text.substr(0, first);
  const std::string nth = text.substr(first + 1, second - first - 1);
  c.fail_result = text.substr(second + 1);
  char* end = nullptr;
  const long n = std::strtol(nth.c_str(), &end, 10);
  if (nth.empty() || *end != '\0' || n < 1 || n > 1000000000) throw malformed();
  c.fail_nth = static_cast<int>(n);
  if (c.fail_call != "ncclCommInitRankConfig" && c.fail_call != "ncclAllReduce" &&
      c.fail_call != "ncclCommFinalize")
    throw malformed();
  if (c.fail_result != "ncclSystemError" && c.fail_result != "ncclInternalError" &&
      c.fail_result != "ncclRemoteError" && c.fail_result != "hang")
    throw malformed();
  return c;
}

const Config& config() {
  static const Config c = read_config();
  return c;
}

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a + 0x9e3779b97f4a7c15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace mnistdp::emu
