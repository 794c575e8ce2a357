#pragma once
// A seeded random source whose output is the same on every platform and compiler. The standard library's
// distributions and std::shuffle are implementation-defined, so the few we need are written out here.
#include <cstdint>
#include <span>

namespace mnistdp {

// splitmix64: tiny, fast, and statistically good enough for initialisation and shuffling.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next_u64() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, 1), 24 random bits: every value is exactly representable as a float.
  float next_unit_float() { return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f; }

  // Uniform in [lo, hi).
  float uniform(float lo, float hi) { return lo + (hi - lo) * next_unit_float(); }

  // Uniform integer in [0, bound), without modulo bias (Lemire's multiply-and-reject).
  std::uint32_t below(std::uint32_t bound) {
    for (;;) {
      const std::uint64_t product = (next_u64() >> 32) * bound;
      const auto low = static_cast<std::uint32_t>(product);
      if (low >= (0u - bound) % bound) return static_cast<std::uint32_t>(product >> 32);
    }
  }

  // Fisher-Yates.
  template <typename T>
  void shuffle(std::span<T> items) {
    for (std::size_t i = items.size(); i > 1; --i) {
      const std::size_t j = below(static_cast<std::uint32_t>(i));
      T tmp = items[i - 1];
      items[i - 1] = items[j];
      items[j] = tmp;
    }
  }

  std::uint64_t state() const { return state_; }

 private:
  std::uint64_t state_;
};

}  // namespace mnistdp
