// Softmax cross-entropy: the loss against -log softmax in double, dlogits against finite differences of the
// double loss, stability with huge logits, and count_correct's tie rule; the CPU path's feature-major version
// against the reference.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/softmax_xent.hpp"
#include "kernels/ref/softmax_xent.hpp"

namespace {

constexpr double kU = 0x1p-24;  // unit roundoff of float

std::size_t sz(int rows, int cols) {
  return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
}

std::vector<float> random_logits(std::mt19937& rng, int batch, int classes, float spread) {
  std::uniform_real_distribution<float> dist(-spread, spread);
  std::vector<float> v(sz(batch, classes));
  for (float& e : v)
    e = dist(rng);
  return v;
}

std::vector<std::uint8_t> random_labels(std::mt19937& rng, int batch, int classes) {
  std::uniform_int_distribution<int> dist(0, classes - 1);
  std::vector<std::uint8_t> v(static_cast<std::size_t>(batch));
  for (auto& e : v)
    e = static_cast<std::uint8_t>(dist(rng));
  return v;
}

// -log softmax(z)[label] of one row, in double, with the same max shift (in double it is only there to keep
// exp finite for the huge-logit rows).
double row_loss(const double* z, int label, int classes) {
  double m = z[0];
  for (int j = 1; j < classes; ++j)
    m = std::max(m, z[j]);
  double sum = 0.0;
  for (int j = 0; j < classes; ++j)
    sum += std::exp(z[j] - m);
  return std::log(sum) - (z[label] - m);
}

double total_loss(const std::vector<double>& z, const std::vector<std::uint8_t>& labels, int batch,
                  int classes) {
  double total = 0.0;
  for (int i = 0; i < batch; ++i)
    total += row_loss(z.data() + sz(i, classes), labels[i], classes);
  return total;
}

// How far the float loss of one row may be from the exact one. The float code computes
// lse = log(sum_j exp(z_j - m)) and lse - (z_label - m): the classes exps (each within 1 ulp, glibc) and
// their sum give sum within (classes + 1) u relatively, which log turns into an absolute error of the same
// size; log itself, z_label - m and the final subtraction each add one rounding of their result (bounded by u
// times |lse| + |z_label - m|); the subtractions z_j - m are exact or within u |z_j - m|, which exp turns
// into u |z_j - m| relative. The bound: (classes + 1) u + 3 u (|lse| + |z_label - m|) + u max_j |z_j - m|,
// doubled for the first-order terms dropped.
double row_loss_tolerance(const double* z, int label, int classes) {
  double m = z[0];
  for (int j = 1; j < classes; ++j)
    m = std::max(m, z[j]);
  double sum = 0.0, spread = 0.0;
  for (int j = 0; j < classes; ++j) {
    sum += std::exp(z[j] - m);
    spread = std::max(spread, m - z[j]);
  }
  const double lse = std::log(sum);
  return 2.0 * ((classes + 1) * kU + 3.0 * kU * (std::fabs(lse) + std::fabs(z[label] - m)) + kU * spread);
}

}  // namespace

TEST_CASE("softmax_xent loss equals -log softmax in double", "[kernels][softmax_xent]") {
  std::mt19937 rng(11);
  for (const int classes : {1, 2, 10, 33}) {
    for (const int batch : {1, 7, 22, 65}) {
      for (const float spread : {1.0f, 30.0f}) {
        INFO("batch " << batch << ", classes " << classes << ", spread " << spread);
        const auto z = random_logits(rng, batch, classes, spread);
        const auto labels = random_labels(rng, batch, classes);
        const std::vector<double> zd(z.begin(), z.end());
        // Row by row, so each row's loss meets its own bound.
        double tol_sum = 0.0;
        for (int i = 0; i < batch; ++i) {
          const double want = row_loss(zd.data() + sz(i, classes), labels[i], classes);
          const double tol = row_loss_tolerance(zd.data() + sz(i, classes), labels[i], classes);
          tol_sum += tol;
          const float got = mnistdp::ref::softmax_xent(z.data() + sz(i, classes), labels.data() + i, nullptr,
                                                       1, classes, 1.0f);
          INFO("row " << i << ": " << got << " vs " << want);
          REQUIRE(std::fabs(got - want) <= tol);
        }
        // The whole batch: the rows summed in double, then one rounding to float.
        const double want = total_loss(zd, labels, batch, classes);
        const float got = mnistdp::ref::softmax_xent(z.data(), labels.data(), nullptr, batch, classes, 1.0f);
        REQUIRE(std::fabs(got - want) <= tol_sum + kU * std::fabs(want));
      }
    }
  }
}

TEST_CASE("softmax_xent dlogits agree with finite differences of the loss", "[kernels][softmax_xent]") {
  std::mt19937 rng(22);
  for (const int classes : {1, 10, 33}) {
    for (const int batch : {1, 7, 22, 65}) {
      INFO("batch " << batch << ", classes " << classes);
      const auto z = random_logits(rng, batch, classes, 4.0f);
      const auto labels = random_labels(rng, batch, classes);
      const float grad_scale = 1.0f / 64.0f;
      std::vector<float> dz(z.size(), std::numeric_limits<float>::quiet_NaN());
      mnistdp::ref::softmax_xent(z.data(), labels.data(), dz.data(), batch, classes, grad_scale);

      // Central difference of grad_scale * loss (the objective dlogits is the gradient of), in double.
      // Step 1e-4: the third derivative of log-sum-exp is at most 1 in size, so the truncation error is below
      // h^2 / 6 = 2e-9; the double rounding of the loss (about 1e-16 times |loss| <= 1e3, divided by 2h)
      // is below 1e-9. kFd = 1e-8 covers both, times grad_scale.
      // The float dlogits: softmax p_j = exp(z_j - m) / sum is within (classes + 3) u relatively (the exp,
      // the sum of classes terms, the division), p - onehot adds one rounding and the scale another; since p
      // <= 1, the absolute error is within (classes + 5) u, times grad_scale. Doubled for the dropped
      // higher-order terms.
      const double h = 1e-4, kFd = 1e-8;
      const double tol = grad_scale * (2.0 * (classes + 5) * kU + kFd);
      std::vector<double> zd(z.begin(), z.end());
      for (std::size_t j = 0; j < zd.size(); ++j) {
        const double saved = zd[j];
        zd[j] = saved + h;
        const double plus = total_loss(zd, labels, batch, classes);
        zd[j] = saved - h;
        const double minus = total_loss(zd, labels, batch, classes);
        zd[j] = saved;
        const double fd = grad_scale * (plus - minus) / (2.0 * h);
        INFO("dlogits[" << j << "] = " << dz[j] << ", finite difference " << fd);
        REQUIRE(std::fabs(dz[j] - fd) <= tol);
      }
    }
  }
}

TEST_CASE("softmax_xent is stable with huge logits", "[kernels][softmax_xent]") {
  // exp(1e4) overflows float (and double); only the max shift keeps these finite.
  const int classes = 4;
  const std::vector<float> z = {
      1e4f,  -1e4f, 0.0f,  1.0f,   // label 0: the max, loss ~ exp(-1e4) ~ 0
      1e4f,  -1e4f, 0.0f,  1.0f,   // label 1: 2e4 below the max, loss 2e4
      -1e4f, -1e4f, -1e4f, -1e4f,  // all equal: loss log 4
      1e4f,  1e4f,  -1e4f, 5e3f,   // two maxima: loss log 2
  };
  const std::vector<std::uint8_t> labels = {0, 1, 2, 1};
  const std::vector<double> zd(z.begin(), z.end());
  std::vector<float> dz(z.size(), std::numeric_limits<float>::quiet_NaN());
  const float loss = mnistdp::ref::softmax_xent(z.data(), labels.data(), dz.data(), 4, classes, 1.0f);
  for (const float v : dz)
    REQUIRE(std::isfinite(v));
  REQUIRE(std::isfinite(loss));
  for (int i = 0; i < 4; ++i) {
    const float row =
        mnistdp::ref::softmax_xent(z.data() + sz(i, classes), labels.data() + i, nullptr, 1, classes, 1.0f);
    const double want = row_loss(zd.data() + sz(i, classes), labels[i], classes);
    INFO("row " << i << ": " << row << " vs " << want);
    REQUIRE(std::fabs(row - want) <= row_loss_tolerance(zd.data() + sz(i, classes), labels[i], classes));
  }
  REQUIRE(std::fabs(loss - (2e4 + std::log(4.0) + std::log(2.0))) <= 2e4 * 4 * kU);
  // Row 1: softmax is (1, 0, 0, 0) to float precision, the label is 1.
  REQUIRE(dz[4] == 1.0f);
  REQUIRE(dz[5] == -1.0f);
  // Row 3: the two maxima share the probability.
  REQUIRE(dz[12] == 0.5f);
  REQUIRE(dz[13] == -0.5f);
  REQUIRE(dz[14] == 0.0f);
}

TEST_CASE("softmax_xent applies grad_scale, rows of dlogits sum to 0, nullptr dlogits",
          "[kernels][softmax_xent]") {
  std::mt19937 rng(33);
  const int batch = 22, classes = 10;
  const auto z = random_logits(rng, batch, classes, 5.0f);
  const auto labels = random_labels(rng, batch, classes);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> d1(z.size(), nan), d64(z.size(), nan), d_tenth(z.size(), nan);
  const float l1 = mnistdp::ref::softmax_xent(z.data(), labels.data(), d1.data(), batch, classes, 1.0f);
  const float l64 =
      mnistdp::ref::softmax_xent(z.data(), labels.data(), d64.data(), batch, classes, 1.0f / 64);
  const float l_tenth =
      mnistdp::ref::softmax_xent(z.data(), labels.data(), d_tenth.data(), batch, classes, 0.1f);
  const float l_null = mnistdp::ref::softmax_xent(z.data(), labels.data(), nullptr, batch, classes, 0.1f);

  // The loss is the unscaled sum, whatever the scale and whether dlogits is written.
  REQUIRE(l1 == l64);
  REQUIRE(l1 == l_tenth);
  REQUIRE(l1 == l_null);
  // The scale is one multiplication of (p - onehot): by a power of two it is exact, by 0.1 it is the same
  // single rounding the test does here.
  for (std::size_t j = 0; j < z.size(); ++j) {
    REQUIRE(d64[j] == d1[j] / 64.0f);
    REQUIRE(d_tenth[j] == d1[j] * 0.1f);
  }
  // sum_j (p_j - onehot_j) = sum_j p_j - 1 = 0 up to the rounding of p (within (classes + 3) u each), the one
  // subtraction and the summation here (in double, exact enough).
  for (int i = 0; i < batch; ++i) {
    double row_sum = 0.0;
    for (int j = 0; j < classes; ++j)
      row_sum += d1[sz(i, classes) + j];
    REQUIRE(std::fabs(row_sum) <= (classes + 3 + 1) * kU * 2.0);
  }
  SECTION("batch 0 gives loss 0") {
    REQUIRE(mnistdp::ref::softmax_xent(nullptr, nullptr, nullptr, 0, classes, 1.0f) == 0.0f);
  }
}

TEST_CASE("count_correct: argmax with the first maximum winning", "[kernels][softmax_xent]") {
  const int classes = 4;
  const std::vector<float> z = {
      0.0f,  3.0f,  3.0f,  1.0f,   // tie between 1 and 2: argmax 1
      0.0f,  3.0f,  3.0f,  1.0f,   // the same row, label 2: wrong
      2.0f,  2.0f,  2.0f,  2.0f,   // all equal: argmax 0
      2.0f,  2.0f,  2.0f,  2.0f,   // all equal, label 3: wrong
      -5.0f, -1.0f, -3.0f, -2.0f,  // negative logits: argmax 1
      0.0f,  0.0f,  0.0f,  7.0f,   // last column
  };
  const std::vector<std::uint8_t> labels = {1, 2, 0, 3, 1, 3};
  REQUIRE(mnistdp::ref::count_correct(z.data(), labels.data(), 6, classes) == 4);
  REQUIRE(mnistdp::ref::count_correct(z.data(), labels.data() + 1, 1, classes) == 0);  // row 0, label 2
  REQUIRE(mnistdp::ref::count_correct(z.data(), labels.data(), 0, classes) == 0);
}

// The CPU path's version reads the logits feature-major and may be split by rows among a team's members: its
// gradient, by rows and feature-major, and its rows' losses summed in row order must be ref::'s bits, every
// element written over NaN, for batches that leave a remainder against the 16-row shares.
TEST_CASE("cpu::softmax_xent on feature-major logits gives ref::'s bits, however the batch is split",
          "[kernels][softmax_xent]") {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  std::mt19937 rng(11);
  for (const int batch : {1, 15, 16, 17, 64, 67})
    for (const int classes : {1, 3, 10})
      for (const int parts : {1, 2, 3}) {
        INFO("batch " << batch << ", classes " << classes << ", " << parts << " parts");
        const auto logits = random_logits(rng, batch, classes, 8.0f);
        const auto labels = random_labels(rng, batch, classes);
        std::vector<float> logitsT(logits.size());
        for (int i = 0; i < batch; ++i)
          for (int j = 0; j < classes; ++j)
            logitsT[sz(j, batch) + static_cast<std::size_t>(i)] =
                logits[sz(i, classes) + static_cast<std::size_t>(j)];
        const float scale = 1.0f / 64.0f;
        std::vector<float> want(logits.size(), kNaN);
        const float want_loss =
            mnistdp::ref::softmax_xent(logits.data(), labels.data(), want.data(), batch, classes, scale);

        std::vector<float> dlogits(logits.size(), kNaN), dlogitsT(logits.size(), kNaN);
        std::vector<float> row_loss(static_cast<std::size_t>(batch), kNaN);
        for (int index = 0; index < parts; ++index)
          mnistdp::cpu::softmax_xent(logitsT.data(), labels.data(), dlogits.data(), dlogitsT.data(),
                                     row_loss.data(), batch, classes, scale, {index, parts});
        double loss_sum = 0.0;
        for (const float loss : row_loss)
          loss_sum += static_cast<double>(loss);
        REQUIRE(static_cast<float>(loss_sum) == want_loss);
        REQUIRE(dlogits == want);
        for (int i = 0; i < batch; ++i)
          for (int j = 0; j < classes; ++j)
            REQUIRE(dlogitsT[sz(j, batch) + static_cast<std::size_t>(i)] ==
                    want[sz(i, classes) + static_cast<std::size_t>(j)]);
      }
  std::vector<float> none(1);
  const std::uint8_t label = 0;
  CHECK_THROWS_WITH(mnistdp::cpu::softmax_xent(none.data(), &label, none.data(), none.data(), none.data(), 1,
                                               mnistdp::cpu::kMaxSoftmaxClasses + 1, 1.0f),
                    "cpu::softmax_xent: 65 classes, not 1 to 64");
}
