// The linear layer: ref:: against finite differences of the same math in double, and blas:: against ref::.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/ref/linear.hpp"

namespace {

using mnistdp::Activation;
using mnistdp::LinearShape;

// The layer's activation in the tests written before there was a choice of one: ReLU or none.
Activation relu_if(bool relu) {
  return relu ? Activation::relu : Activation::identity;
}

// Unit roundoff of float: every float operation is exact up to a factor (1 + d), |d| <= u.
constexpr double kU = 0x1p-24;

// Higham's gamma_n = n u / (1 - n u): |fl(sum_{i<n} a_i b_i) - sum a_i b_i| <= gamma_n sum |a_i b_i| for a
// dot product accumulated left to right in float (Higham, Accuracy and Stability of Numerical
// Algorithms, 3.1).
double gamma_n(int n) {
  return n * kU / (1.0 - n * kU);
}

std::size_t sz(int rows, int cols) {
  return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
}

std::vector<float> random_vec(std::mt19937& rng, std::size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& e : v)
    e = dist(rng);
  return v;
}

std::vector<double> to_double(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

std::string shape_name(LinearShape s) {
  return "batch " + std::to_string(s.batch) + ", in " + std::to_string(s.in) + ", out " +
         std::to_string(s.out);
}

// Indices of the entries whose derivative is checked: all of them for small tensors, otherwise a random
// sample (a full finite-difference sweep of a [33, 784] weight would cost 50k forward passes for no extra
// insight: an indexing mistake shows on most entries, and the sample covers first and last rows and columns).
std::vector<std::size_t> sample_indices(std::mt19937& rng, std::size_t n, std::size_t max_count = 48) {
  std::vector<std::size_t> idx;
  if (n <= max_count) {
    for (std::size_t j = 0; j < n; ++j)
      idx.push_back(j);
    return idx;
  }
  idx.push_back(0);
  idx.push_back(n - 1);
  std::uniform_int_distribution<std::size_t> dist(0, n - 1);
  while (idx.size() < max_count)
    idx.push_back(dist(rng));
  return idx;
}

// The scalar objective the gradients are checked through, in double:
//   L(x, w, b) = sum_{i,o} r[i][o] * y[i][o],  y = a w^T + b,  a = relu_input ? relu(x) : x
// relu_input models a layer whose input is a ReLU's output: then dL/dx is dy w masked by (x > 0).
// Also returns the sum of the absolute values of every term, which bounds the double rounding of L.
struct Objective {
  double value;
  double abs_terms;
};

Objective objective(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                    const std::vector<double>& r, LinearShape s, bool relu_input) {
  Objective total{0.0, 0.0};
  for (int i = 0; i < s.batch; ++i) {
    for (int o = 0; o < s.out; ++o) {
      double y = b[o];
      double y_abs = std::fabs(b[o]);
      for (int k = 0; k < s.in; ++k) {
        double a = x[sz(i, s.in) + k];
        if (relu_input && a < 0.0) a = 0.0;
        y += a * w[sz(o, s.in) + k];
        y_abs += std::fabs(a * w[sz(o, s.in) + k]);
      }
      total.value += r[sz(i, s.out) + o] * y;
      total.abs_terms += std::fabs(r[sz(i, s.out) + o]) * y_abs;
    }
  }
  return total;
}

// The finite-difference step. L is affine in every single coordinate of w and b, and in a coordinate of x as
// long as the step does not carry it across the ReLU's kink; the inputs keep |x| >= 0.25 > h for that. So the
// central difference has no truncation error at all, and a large step costs nothing while it divides the
// double rounding of L by as little as possible. A power of two keeps v +- h and the division by 2h exact.
constexpr double kFdStep = 0.125;

struct FiniteDifference {
  double value;
  double error_bound;  // of value, against the exact derivative
};

// Central difference of L in coordinate j of v (one of x, w, b).
// Each evaluation of L rounds every term at most in + 2 + batch * out times (the dot product, the bias, the
// product with r, the running total), so it is within gamma^double_n * abs_terms of exact (Higham 3.1); the
// difference of two is within twice that, divided by 2h.
template <class F>
FiniteDifference central_difference(std::vector<double>& v, std::size_t j, LinearShape s, F&& f) {
  const double saved = v[j];
  v[j] = saved + kFdStep;
  const Objective plus = f();
  v[j] = saved - kFdStep;
  const Objective minus = f();
  v[j] = saved;
  const double n = s.in + 2.0 + static_cast<double>(s.batch) * s.out;
  const double gamma_d = n * 0x1p-53 / (1.0 - n * 0x1p-53);
  return {(plus.value - minus.value) / (2.0 * kFdStep),
          gamma_d * (plus.abs_terms + minus.abs_terms) / (2.0 * kFdStep)};
}

// Values with 0.25 <= |v| <= 1, so that a finite-difference step of 0.125 never crosses the ReLU's kink.
std::vector<float> random_away_from_zero(std::mt19937& rng, std::size_t n) {
  std::vector<float> v = random_vec(rng, n, 0.25f, 1.0f);
  std::bernoulli_distribution negative(0.5);
  for (float& e : v)
    if (negative(rng)) e = -e;
  return v;
}

const std::vector<LinearShape> kOddShapes = [] {
  std::vector<LinearShape> shapes;
  for (int batch : {1, 7, 22, 65})
    for (int in : {1, 33, 784})
      for (int out : {1, 10, 33})
        shapes.push_back({batch, in, out});
  return shapes;
}();

}  // namespace

TEST_CASE("ref::linear_forward matches the same math in double", "[kernels][linear]") {
  std::mt19937 rng(101);
  for (const LinearShape s : kOddShapes) {
    for (const bool relu : {false, true}) {
      INFO(shape_name(s) << (relu ? ", relu" : ""));
      const auto x = random_vec(rng, sz(s.batch, s.in));
      const auto w = random_vec(rng, sz(s.out, s.in));
      const auto b = random_vec(rng, static_cast<std::size_t>(s.out));
      std::vector<float> y(sz(s.batch, s.out), std::numeric_limits<float>::quiet_NaN());
      mnistdp::ref::linear_forward(x.data(), w.data(), b.data(), y.data(), s, relu_if(relu));
      for (int i = 0; i < s.batch; ++i) {
        for (int o = 0; o < s.out; ++o) {
          double exact = b[o];
          double abs_sum = std::fabs(b[o]);
          for (int k = 0; k < s.in; ++k) {
            const double t = static_cast<double>(x[sz(i, s.in) + k]) * w[sz(o, s.in) + k];
            exact += t;
            abs_sum += std::fabs(t);
          }
          if (relu && exact < 0.0) exact = 0.0;  // relu is 1-Lipschitz: the bound below still holds after it
          // The in products and the bias add: in + 1 roundings, gamma_{in+1} of the absolute terms.
          REQUIRE(std::fabs(y[sz(i, s.out) + o] - exact) <= gamma_n(s.in + 1) * abs_sum);
        }
      }
    }
  }
}

TEST_CASE("ref::linear_backward dw, db, dx agree with finite differences", "[kernels][linear]") {
  std::mt19937 rng(202);
  for (const LinearShape s : kOddShapes) {
    for (const bool relu_mask : {false, true}) {
      INFO(shape_name(s) << (relu_mask ? ", relu mask" : ""));
      // With relu_mask the layer's input is relu(u): the objective is taken in u, and ref:: gets x = relu(u).
      const auto u = random_away_from_zero(rng, sz(s.batch, s.in));
      const auto w = random_vec(rng, sz(s.out, s.in));
      const auto b = random_vec(rng, static_cast<std::size_t>(s.out));
      const auto r = random_vec(rng, sz(s.batch, s.out));  // dL/dy
      std::vector<float> x = u;
      if (relu_mask)
        for (float& e : x)
          e = e < 0.0f ? 0.0f : e;

      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> dw(sz(s.out, s.in), nan), db(static_cast<std::size_t>(s.out), nan);
      std::vector<float> dx(sz(s.batch, s.in), nan);
      mnistdp::ref::linear_backward(r.data(), x.data(), w.data(), dw.data(), db.data(), dx.data(), s,
                                    relu_if(relu_mask));

      auto ud = to_double(u), wd = to_double(w), bd = to_double(b);
      const auto rd = to_double(r);
      auto L = [&] { return objective(ud, wd, bd, rd, s, relu_mask); };

      // Each tolerance is the float rounding bound of the reference's own sum, gamma_n times the sum of the
      // absolute terms (computed here in double), plus the bound on the finite difference's own rounding.
      for (const std::size_t j : sample_indices(rng, dw.size())) {
        const int o = static_cast<int>(j / static_cast<std::size_t>(s.in));
        const int k = static_cast<int>(j % static_cast<std::size_t>(s.in));
        double abs_sum = 0.0;
        for (int i = 0; i < s.batch; ++i)
          abs_sum += std::fabs(rd[sz(i, s.out) + o] * x[sz(i, s.in) + k]);
        const FiniteDifference fd = central_difference(wd, j, s, L);
        INFO("dw[" << o << "][" << k << "] = " << dw[j] << ", finite difference " << fd.value);
        REQUIRE(std::fabs(dw[j] - fd.value) <= gamma_n(s.batch) * abs_sum + fd.error_bound);
      }
      for (int o = 0; o < s.out; ++o) {
        double abs_sum = 0.0;
        for (int i = 0; i < s.batch; ++i)
          abs_sum += std::fabs(rd[sz(i, s.out) + o]);
        const FiniteDifference fd = central_difference(bd, static_cast<std::size_t>(o), s, L);
        INFO("db[" << o << "] = " << db[o] << ", finite difference " << fd.value);
        REQUIRE(std::fabs(db[o] - fd.value) <= gamma_n(s.batch) * abs_sum + fd.error_bound);
      }
      for (const std::size_t j : sample_indices(rng, dx.size())) {
        const int i = static_cast<int>(j / static_cast<std::size_t>(s.in));
        const int k = static_cast<int>(j % static_cast<std::size_t>(s.in));
        double abs_sum = 0.0;
        for (int o = 0; o < s.out; ++o)
          abs_sum += std::fabs(rd[sz(i, s.out) + o] * w[sz(o, s.in) + k]);
        const FiniteDifference fd = central_difference(ud, j, s, L);
        INFO("dx[" << i << "][" << k << "] = " << dx[j] << ", finite difference " << fd.value);
        REQUIRE(std::fabs(dx[j] - fd.value) <= gamma_n(s.out) * abs_sum + fd.error_bound);
        if (relu_mask && u[j] < 0.0f) REQUIRE(dx[j] == 0.0f);  // masked exactly, not just small
      }
    }
  }
}

TEST_CASE("ref::linear_backward with dx nullptr and with batch 0", "[kernels][linear]") {
  std::mt19937 rng(303);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  SECTION("dx nullptr still writes dw and db, identical to the call with dx") {
    const LinearShape s{7, 33, 10};
    const auto dy = random_vec(rng, sz(s.batch, s.out));
    const auto x = random_vec(rng, sz(s.batch, s.in));
    const auto w = random_vec(rng, sz(s.out, s.in));
    std::vector<float> dw1(sz(s.out, s.in), nan), db1(10, nan), dx(sz(s.batch, s.in), nan);
    std::vector<float> dw2(sz(s.out, s.in), nan), db2(10, nan);
    mnistdp::ref::linear_backward(dy.data(), x.data(), w.data(), dw1.data(), db1.data(), dx.data(), s,
                                  Activation::identity);
    mnistdp::ref::linear_backward(dy.data(), x.data(), w.data(), dw2.data(), db2.data(), nullptr, s,
                                  Activation::identity);
    REQUIRE(dw1 == dw2);
    REQUIRE(db1 == db2);
  }
  SECTION("batch 0 gives dw = 0 and db = 0") {
    const LinearShape s{0, 33, 10};
    const auto w = random_vec(rng, sz(s.out, s.in));
    std::vector<float> dw(sz(s.out, s.in), nan), db(10, nan);
    mnistdp::ref::linear_backward(nullptr, nullptr, w.data(), dw.data(), db.data(), nullptr, s,
                                  Activation::relu);
    for (const float v : dw)
      REQUIRE(v == 0.0f);
    for (const float v : db)
      REQUIRE(v == 0.0f);
  }
}

namespace {

// Per element: |blas - ref| <= 1e-5 (|ref| + rms(ref)).
// Both sides round a dot product in float, in different orders (OpenBLAS splits the sum into vector lanes and
// blocks), and the rounding error of a dot product scales with the magnitude of its terms, not of its result:
// an element that cancels to nearly zero keeps an absolute error of the size its neighbours have, hence the
// floor rms(ref), the tensor's typical magnitude. With random terms the error of a length-n float sum is
// about u sqrt(n / 6) times that magnitude, 7e-7 for n = 784, so 1e-5 leaves a margin of about 3 at the
// largest deviation over 50k elements, while a wrong index or a missed term gives errors of order 1.
void require_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  double sq = 0.0;
  for (const float v : want)
    sq += static_cast<double>(v) * v;
  const double rms = want.empty() ? 0.0 : std::sqrt(sq / static_cast<double>(want.size()));
  // One assertion per tensor (a million per-element assertions would dominate the test's time): the worst
  // element relative to its bound, reported with its index and values.
  double worst = 0.0;
  std::size_t worst_j = 0;
  for (std::size_t j = 0; j < got.size(); ++j) {
    const double err = std::fabs(static_cast<double>(got[j]) - want[j]);
    const double bound = 1e-5 * (std::fabs(want[j]) + rms);
    // !(err <= bound) also catches NaN: a poisoned element left unwritten.
    const double ratio = !(err <= bound) ? std::numeric_limits<double>::infinity()
                         : bound > 0.0   ? err / bound
                                         : 0.0;
    if (ratio > worst || j == 0) {
      worst = ratio;
      worst_j = j;
    }
  }
  if (got.empty()) return;
  INFO(what << "[" << worst_j << "]: blas " << got[worst_j] << ", ref " << want[worst_j] << ", rms " << rms);
  REQUIRE(worst <= 1.0);
  if (std::getenv("MNISTDP_SHOW_ERRORS") != nullptr) WARN(what << ": worst error / bound " << worst);
}

void check_blas_against_ref(std::mt19937& rng, LinearShape s) {
  INFO(shape_name(s));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto w = random_vec(rng, sz(s.out, s.in));
  const auto b = random_vec(rng, static_cast<std::size_t>(s.out));
  const auto dy = random_vec(rng, sz(s.batch, s.out));
  // x with about half its entries exactly 0, as a ReLU's output, so the mask has something to do.
  auto x = random_vec(rng, sz(s.batch, s.in));
  for (float& e : x)
    e = e < 0.0f ? 0.0f : e;

  for (const bool relu : {false, true}) {
    std::vector<float> y_ref(sz(s.batch, s.out), nan), y_blas(sz(s.batch, s.out), nan);
    mnistdp::ref::linear_forward(x.data(), w.data(), b.data(), y_ref.data(), s, relu_if(relu));
    mnistdp::blas::linear_forward(x.data(), w.data(), b.data(), y_blas.data(), s, relu_if(relu));
    require_close(y_blas, y_ref, relu ? "y (relu)" : "y");
  }
  for (const bool relu_mask : {false, true}) {
    std::vector<float> dw_ref(sz(s.out, s.in), nan), db_ref(static_cast<std::size_t>(s.out), nan);
    std::vector<float> dx_ref(sz(s.batch, s.in), nan);
    std::vector<float> dw_blas = dw_ref, db_blas = db_ref, dx_blas = dx_ref;
    mnistdp::ref::linear_backward(dy.data(), x.data(), w.data(), dw_ref.data(), db_ref.data(), dx_ref.data(),
                                  s, relu_if(relu_mask));
    mnistdp::blas::linear_backward(dy.data(), x.data(), w.data(), dw_blas.data(), db_blas.data(),
                                   dx_blas.data(), s, relu_if(relu_mask));
    require_close(dw_blas, dw_ref, "dw");
    REQUIRE(db_blas == db_ref);  // same order of the same float adds: equal to the bit
    require_close(dx_blas, dx_ref, relu_mask ? "dx (masked)" : "dx");
    if (relu_mask) {
      std::size_t unmasked = 0;  // entries where x == 0 but dx is not exactly 0
      for (std::size_t j = 0; j < x.size(); ++j)
        unmasked += x[j] == 0.0f && dx_blas[j] != 0.0f;
      REQUIRE(unmasked == 0);
    }

    // dx nullptr: dw and db as before, nothing else touched.
    std::vector<float> dw_skip(dw_ref.size(), nan), db_skip(db_ref.size(), nan);
    mnistdp::blas::linear_backward(dy.data(), x.data(), w.data(), dw_skip.data(), db_skip.data(), nullptr, s,
                                   relu_if(relu_mask));
    REQUIRE(dw_skip == dw_blas);
    REQUIRE(db_skip == db_blas);
  }
}

}  // namespace

TEST_CASE("blas::linear agrees with ref:: on odd shapes", "[kernels][linear][blas]") {
  mnistdp::blas::set_threads(1);
  std::mt19937 rng(404);
  for (const LinearShape s : kOddShapes)
    check_blas_against_ref(rng, s);
}

TEST_CASE("blas::linear agrees with ref:: on the training shapes", "[kernels][linear][blas]") {
  mnistdp::blas::set_threads(1);
  std::mt19937 rng(505);
  // Shard sizes of a 64-row batch over 1, 2, 3 and 8 replicas, for fc1 (784 -> 256) and fc2 (256 -> 10).
  for (int batch : {64, 32, 22, 8}) {
    check_blas_against_ref(rng, {batch, 784, 256});
    check_blas_against_ref(rng, {batch, 256, 10});
  }
}

TEST_CASE("blas::linear with batch 0 writes zero gradients", "[kernels][linear][blas]") {
  std::mt19937 rng(606);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const LinearShape s : {LinearShape{0, 784, 256}, LinearShape{0, 256, 10}}) {
    INFO(shape_name(s));
    const auto w = random_vec(rng, sz(s.out, s.in));
    const auto b = random_vec(rng, static_cast<std::size_t>(s.out));
    // Valid but empty inputs: the pointers a replica with no rows would pass.
    std::vector<float> x, dy, y, dx;
    mnistdp::blas::linear_forward(x.data(), w.data(), b.data(), y.data(), s, Activation::relu);
    std::vector<float> dw(sz(s.out, s.in), nan), db(static_cast<std::size_t>(s.out), nan);
    mnistdp::blas::linear_backward(dy.data(), x.data(), w.data(), dw.data(), db.data(), dx.data(), s,
                                   Activation::relu);
    for (const float v : dw)
      REQUIRE(v == 0.0f);
    for (const float v : db)
      REQUIRE(v == 0.0f);
  }
}
