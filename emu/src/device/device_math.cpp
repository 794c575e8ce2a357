// The device's expf, logf and erff with CUDA's documented latitude (emu/include/emu/device_math.hpp).
#include "emu/device_math.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "emu/src/runtime/config.hpp"

namespace mnistdp::emu {
namespace {

// The CUDA C++ Programming Guide's maximum ulp errors for these functions (full range).
constexpr int kExpfUlps = 2;
constexpr int kLogfUlps = 1;
constexpr int kErffUlps = 2;

std::uint64_t bits_of(float x) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

// The result of a function of x, given in double (whose own error, under one ulp of a double, is 2^-29 of
// a float's ulp: rounding it to float gives the correctly rounded result but for arguments within that
// distance of a tie), moved within the function's bound.
float with_latitude(double exact, float x, int max_ulps, std::uint64_t salt) {
  const auto rounded = static_cast<float>(exact);
  if (static_cast<double>(rounded) == exact) return rounded;  // exact results, infinities, NaN
  return within_ulps(rounded, max_ulps, mix(config().seed ^ salt, bits_of(x)));
}

}  // namespace

float within_ulps(float correctly_rounded, int max_ulps, std::uint64_t draw) {
  const float r = correctly_rounded;
  if (!std::isnormal(r)) return r;
  const int steps = static_cast<int>(draw % static_cast<std::uint64_t>(2 * max_ulps + 1)) - max_ulps;
  const float toward =
      steps < 0 ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  float out = r;
  for (int s = 0; s < std::abs(steps); ++s) {
    const float next = std::nextafter(out, toward);
    // Never to a subnormal, a zero or an infinity: the bound is no licence to leave the normal range.
    if (!std::isnormal(next)) break;
    out = next;
  }
  return out;
}

float device_expf(float x) {
  return with_latitude(std::exp(static_cast<double>(x)), x, kExpfUlps, 0x65787066ull);  // "expf"
}

float device_logf(float x) {
  return with_latitude(std::log(static_cast<double>(x)), x, kLogfUlps, 0x6c6f6766ull);  // "logf"
}

float device_erff(float x) {
  const float r = with_latitude(std::erf(static_cast<double>(x)), x, kErffUlps, 0x65726666ull);  // "erff"
  // Near |x| = 4 the correctly rounded result is 1 itself; the latitude may move it down, never past 1.
  return std::fabs(r) > 1.0f ? std::copysign(1.0f, r) : r;
}

}  // namespace mnistdp::emu
