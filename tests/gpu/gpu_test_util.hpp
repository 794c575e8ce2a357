#pragma once
// Helpers shared by the GPU tests: random inputs, SGD settings, device copies, NaN poisoning and the error
// norm.
//
// The error norm. Every comparison of floats uses the normwise relative error in the max norm,
//     err = max_i |got_i - want_i| / max_i |want_i|,
// not the error of each element relative to itself: a dot product of hundreds of terms that cancels to nearly
// zero carries an absolute rounding error set by the size of its terms, not of its result, so an elementwise
// relative error would flag correct kernels. Float rounding is proportional to the magnitude of the data,
// which the max norm of the reference measures. When the reference is all zeros, got must be exactly zero; a
// NaN anywhere in got (a poisoned element that was never written) is an infinite error.
#include <cuda_runtime_api.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "host/model/random.hpp"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/memory.hpp"
#include "kernels/ref/sgd.hpp"
#include "tests/skip_test.hpp"

namespace mnistdp::gpu_test {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MNISTDP_TEST_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)  // clang's way of saying it
#define MNISTDP_TEST_UNDER_SANITIZER 1
#endif
#endif

// Under a sanitizer (the emulated build's emu-asan and emu-tsan, 10 to 150 times slower than emu) the longer
// tests run fewer steps, options and shapes. What they keep is what the sanitizers look at: every kernel and
// path, the shapes that are not multiples of any tile (where a bounds check goes wrong), an epoch's end.
#if defined(MNISTDP_TEST_UNDER_SANITIZER)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif

// A sweep's values (sizes, options): the whole list, or under a sanitizer the shorter one.
template <typename T = int>
std::vector<T> sweep(std::vector<T> all, std::vector<T> under_sanitizer) {
  return kUnderSanitizer ? under_sanitizer : all;
}

// Which of `options` a combination of a sweep's values takes, in turn: the sum of the values' positions in
// their lists, modulo the options. Where another list has at least `options` values, each option meets every
// value of every list (a tile edge, an empty batch) at 1/options of the cost of every option with every
// combination.
template <typename T = int>
int in_turn(int options, const std::vector<std::pair<std::vector<T>, T>>& lists_and_values) {
  int sum = 0;
  for (const auto& [values, value] : lists_and_values)
    sum += static_cast<int>(std::find(values.begin(), values.end(), value) - values.begin());
  return sum % options;
}

using mnistdp::test::skip_test;

inline SgdConfig sgd_config(float lr, float momentum, float dampening, float weight_decay, bool nesterov) {
  SgdConfig c;
  c.lr = lr;
  c.momentum = momentum;
  c.dampening = dampening;
  c.weight_decay = weight_decay;
  c.nesterov = nesterov;
  return c;
}

inline std::vector<float> random_floats(std::size_t n, Rng& rng, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(n);
  for (float& x : v)
    x = rng.uniform(lo, hi);
  return v;
}

inline std::vector<std::uint8_t> random_bytes(std::size_t n, Rng& rng, std::uint32_t bound = 256) {
  std::vector<std::uint8_t> v(n);
  for (auto& x : v)
    x = static_cast<std::uint8_t>(rng.below(bound));
  return v;
}

// The copies and memsets below run on the legacy default stream, which the kernels' non-blocking streams do
// not wait for (and a copy from pageable memory may return before its DMA ends): each helper waits for the
// device before returning, so that a kernel launched next sees the data.
template <typename T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
  DeviceBuffer<T> dev(host.size());
  if (!host.empty()) CUDA_CHECK(cudaMemcpy(dev.data(), host.data(), dev.bytes(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaDeviceSynchronize());
  return dev;
}

// dev: [host.size()] device memory. Returns once the copy has landed (a pageable copy may still be on its way
// when cudaMemcpy returns, and the kernels under test run on non-blocking streams).
template <typename T>
void copy_to_device(T* dev, const std::vector<T>& host) {
  if (!host.empty())
    CUDA_CHECK(cudaMemcpy(dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaDeviceSynchronize());
}

template <typename T>
void copy_to_device(DeviceBuffer<T>& dev, const std::vector<T>& host) {
  REQUIRE(dev.size() == host.size());
  copy_to_device(dev.data(), host);
}

// Waits for all work on the device (the kernels under test run on their own non-blocking streams), then
// copies.
template <typename T>
std::vector<T> to_host(const T* dev, std::size_t n) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> host(n);
  if (n) CUDA_CHECK(cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

template <typename T>
std::vector<T> to_host(const DeviceBuffer<T>& dev) {
  return to_host(dev.data(), dev.size());
}

// All bytes 0xFF: as float, a NaN; any element a kernel fails to write then fails the comparison.
template <typename T>
void poison(DeviceBuffer<T>& dev) {
  if (!dev.empty()) CUDA_CHECK(cudaMemset(dev.data(), 0xFF, dev.bytes()));
  CUDA_CHECK(cudaDeviceSynchronize());
}

// The normwise relative error described above; infinity on a size mismatch or any NaN in got.
inline double max_rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (got.size() != want.size()) return kInf;
  double max_diff = 0.0;
  double max_want = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return kInf;
    if (std::isnan(want[i])) continue;
    max_diff = std::fmax(max_diff, std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
    max_want = std::fmax(max_want, std::fabs(static_cast<double>(want[i])));
  }
  if (max_want == 0.0) return max_diff == 0.0 ? 0.0 : kInf;
  return max_diff / max_want;
}

inline double rel_error(double got, double want) {
  if (std::isnan(got)) return std::numeric_limits<double>::infinity();
  const double diff = std::fabs(got - want);
  if (want == 0.0) return diff == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return diff / std::fabs(want);
}

template <typename T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

}  // namespace mnistdp::gpu_test
