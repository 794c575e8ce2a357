// The emulated libraries take the latitude the real ones document, so that a test holding a GPU to bits it
// does not promise fails here too (docs/emulation.md, "cuBLAS and NCCL" and "The device's math functions"):
// expf, logf and erff answer within CUDA's error bounds rather than with glibc's correctly rounded results,
// and cuBLAS sums in an order of its own. Each stays a function of its inputs, as on a GPU: the same
// arguments give the same bits on every call.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cuda/gemm/gemm.hpp"
#include "tests/emu/math_kernels.hpp"
#include "tests/gpu/gpu_test_util.hpp"

namespace mnistdp {
namespace {

using gpu_test::bitwise_equal;
using gpu_test::poison;
using gpu_test::random_floats;
using gpu_test::to_device;
using gpu_test::to_host;

// Floats in the order of the reals, as integers: the distance in ulps between two floats of one sign.
std::int64_t ordinal(float v) {
  std::int32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  return bits < 0 ? -static_cast<std::int64_t>(bits & 0x7fffffff) : bits;
}

std::int64_t ulps_between(float a, float b) {
  return std::llabs(ordinal(a) - ordinal(b));
}

struct ExpLog {
  std::vector<float> exps;
  std::vector<float> logs;
};

ExpLog exp_and_log_on_device(const std::vector<float>& x) {
  const auto d_x = to_device(x);
  DeviceBuffer<float> d_exps(x.size()), d_logs(x.size());
  poison(d_exps);
  poison(d_logs);
  Stream stream;
  emu_test::exp_and_log(d_x.data(), d_exps.data(), d_logs.data(), static_cast<int>(x.size()), stream.get());
  stream.synchronize();
  return {to_host(d_exps), to_host(d_logs)};
}

std::vector<float> erf_on_device(const std::vector<float>& x) {
  const auto d_x = to_device(x);
  DeviceBuffer<float> d_erfs(x.size());
  poison(d_erfs);
  Stream stream;
  emu_test::erf_of(d_x.data(), d_erfs.data(), static_cast<int>(x.size()), stream.get());
  stream.synchronize();
  return to_host(d_erfs);
}

}  // namespace

TEST_CASE("erff on an emulated device keeps within CUDA's error bound, not to glibc's bits", "[emu]") {
  // GELU's range and beyond: erf is 1 to the float beyond about |x| = 3.9.
  Rng rng(20261207);
  const std::size_t n = 4096;
  const std::vector<float> x = random_floats(n, rng, -5.0f, 5.0f);
  const std::vector<float> got = erf_on_device(x);
  std::size_t moved = 0;
  std::int64_t worst = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto erf_rn = static_cast<float>(std::erf(static_cast<double>(x[i])));
    worst = std::max(worst, ulps_between(got[i], erf_rn));
    moved += got[i] != erf_rn ? 1 : 0;
    CHECK(std::fabs(got[i]) <= 1.0f);  // erf's range, kept by a GPU's erff as well
  }
  // The CUDA C++ Programming Guide's bound for erff: 2 ulps.
  CHECK(worst == 2);
  CAPTURE(moved);
  CHECK(moved > n / 2);
  // A function of its argument.
  std::vector<float> reversed(x.rbegin(), x.rend());
  std::vector<float> again = erf_on_device(reversed);
  std::reverse(again.begin(), again.end());
  CHECK(bitwise_equal(again, got));

  const float inf = std::numeric_limits<float>::infinity();
  const auto special = erf_on_device({0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN()});
  CHECK(special[0] == 0.0f);
  CHECK(special[1] == 1.0f);
  CHECK(special[2] == -1.0f);
  CHECK(std::isnan(special[3]));
}

TEST_CASE("expf and logf on an emulated device keep within CUDA's error bounds, not to glibc's bits",
          "[emu]") {
  // Arguments whose exponentials are normal floats: a GPU's latitude, not the range's edges.
  Rng rng(20261205);
  const std::size_t n = 4096;
  std::vector<float> x = random_floats(n / 2, rng, -87.0f, 0.0f);
  const auto positive = random_floats(n / 2, rng, 0.0f, 88.0f);
  x.insert(x.end(), positive.begin(), positive.end());
  const ExpLog got = exp_and_log_on_device(x);

  std::size_t exp_moved = 0;
  std::size_t log_moved = 0;
  std::size_t logs = 0;
  std::int64_t worst_exp = 0;
  std::int64_t worst_log = 0;
  for (std::size_t i = 0; i < n; ++i) {
    // Correctly rounded: the double result's error is far below half a float's ulp.
    const auto exp_rn = static_cast<float>(std::exp(static_cast<double>(x[i])));
    worst_exp = std::max(worst_exp, ulps_between(got.exps[i], exp_rn));
    exp_moved += got.exps[i] != exp_rn ? 1 : 0;
    if (x[i] < 0.0f) {
      CHECK(std::isnan(got.logs[i]));
    } else if (x[i] > 0.0f) {
      const auto log_rn = static_cast<float>(std::log(static_cast<double>(x[i])));
      worst_log = std::max(worst_log, ulps_between(got.logs[i], log_rn));
      log_moved += got.logs[i] != log_rn ? 1 : 0;
      ++logs;
    }
  }
  // The CUDA C++ Programming Guide's bounds: 2 ulps for expf, 1 for logf.
  CHECK(worst_exp == 2);
  CHECK(worst_log == 1);
  // A test that held these kernels' results to glibc's would fail on most of them, as it may on a GPU.
  CAPTURE(exp_moved, log_moved, logs);
  CHECK(exp_moved > n / 2);
  CHECK(log_moved > logs / 2);

  // A function of its argument: the same arguments in another order, on another launch, give the same bits.
  std::vector<float> reversed(x.rbegin(), x.rend());
  ExpLog again = exp_and_log_on_device(reversed);
  std::reverse(again.exps.begin(), again.exps.end());
  std::reverse(again.logs.begin(), again.logs.end());
  CHECK(bitwise_equal(again.exps, got.exps));
  CHECK(bitwise_equal(again.logs, got.logs));
}

TEST_CASE("expf and logf give the special values CUDA documents exactly", "[emu]") {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x{0.0f, 1.0f, -inf, inf, std::numeric_limits<float>::quiet_NaN()};
  const ExpLog got = exp_and_log_on_device(x);
  CHECK(got.exps[0] == 1.0f);
  CHECK(got.logs[1] == 0.0f);
  CHECK(got.exps[2] == 0.0f);
  CHECK(got.exps[3] == inf);
  CHECK(got.logs[0] == -inf);
  CHECK(got.logs[3] == inf);
  CHECK(std::isnan(got.exps[4]));
  CHECK(std::isnan(got.logs[4]));
}

TEST_CASE("cuBLAS sums in an order of its own: within a sum's error bound of the hand-written GEMMs' bits",
          "[emu]") {
  const int m = GENERATE(64, 22);
  const int n = GENERATE(256, 10);
  const int k = GENERATE(784, 256, 10);
  CAPTURE(m, n, k);
  Rng rng(static_cast<std::uint64_t>(m * 1000003 + n * 1009 + k));
  const auto nm = static_cast<std::size_t>(m), nn = static_cast<std::size_t>(n),
             nk = static_cast<std::size_t>(k);
  const auto a = random_floats(nm * nk, rng);  // [m, k]
  const auto b = random_floats(nk * nn, rng);  // [k, n]
  const auto d_a = to_device(a);
  const auto d_b = to_device(b);
  DeviceBuffer<float> d_c(nm * nn);
  Stream stream;
  CublasHandle cublas(stream.get());
  cuda::GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = d_a.data();
  p.lda = k;
  p.b = d_b.data();
  p.ldb = n;
  p.c = d_c.data();
  p.ldc = n;
  const auto product = [&](GemmImpl impl) {
    poison(d_c);
    cuda::gemm(p, impl, stream.get(), cublas.get());
    return to_host(d_c);
  };
  const auto hand_written = product(GemmImpl::naive);
  const auto library = product(GemmImpl::cublas);
  // Two orders of one k-term sum differ by at most 2 gamma_k sum |a b|, gamma_k = k u / (1 - k u).
  const double u = std::ldexp(1.0, -24);
  const double gamma = k * u / (1.0 - k * u);
  std::size_t differ = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double magnitude = 0.0;
      for (int q = 0; q < k; ++q)
        magnitude += std::abs(static_cast<double>(a[static_cast<std::size_t>(i) * nk + q]) *
                              b[static_cast<std::size_t>(q) * nn + j]);
      const std::size_t at = static_cast<std::size_t>(i) * nn + j;
      const double gap = std::abs(static_cast<double>(library[at]) - hand_written[at]);
      CHECK(gap <= 2.0 * gamma * magnitude);
      differ += library[at] != hand_written[at] ? 1 : 0;
    }
  // A test that held cuBLAS to the hand-written bits would fail here, as it may on a GPU.
  CAPTURE(differ);
  CHECK(differ > 0);
  // cuBLAS gives the same bits on every call on one GPU (its documentation's "Results reproducibility").
  CHECK(bitwise_equal(product(GemmImpl::cublas), library));
}

}  // namespace mnistdp
