// The CPU training path's product (kernels/cpu/gemm.hpp) and its feature-major linear layer
// (kernels/cpu/linear.hpp), in every instruction-set version this CPU can run, against ref:: and exact sums.
// A version the CPU cannot run is reported skipped.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/isa_dispatch.hpp"
#include "kernels/cpu/linear.hpp"
#include "kernels/ref/linear.hpp"
#include "kernels/ref/sgd.hpp"
#include "tests/cpu_isa.hpp"

namespace {

using mnistdp::LinearShape;
using mnistdp::cpu::Isa;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using mnistdp::testing::skip_unless_supported;
using mnistdp::testing::supported;

std::size_t sz(int rows, int cols) {
  return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
}

std::vector<float> random_vec(std::mt19937& rng, std::size_t n) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& e : v)
    e = dist(rng);
  return v;
}

std::vector<float> transposed(const std::vector<float>& m, int rows, int cols) {
  std::vector<float> t(m.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      t[sz(c, rows) + r] = m[sz(r, cols) + c];
  return t;
}

// Higham's gamma_n: a sum of n products accumulated in float, each step rounded once (a fused multiply-add)
// or twice (a product, then a sum; gamma_2n covers it), is within gamma_n times the sum of the terms'
// magnitudes of the exact value.
double gamma_n(int n) {
  const double u = 0x1p-24;
  return n * u / (1.0 - n * u);
}

// C = A B + bias (ReLU, mask) in double, with the bound a float computation of it must meet.
struct Exact {
  std::vector<double> value;
  std::vector<double> bound;
};

Exact exact_product(const mnistdp::cpu::Gemm& g) {
  Exact e{std::vector<double>(sz(g.m, g.n)), std::vector<double>(sz(g.m, g.n))};
  for (int i = 0; i < g.m; ++i)
    for (int j = 0; j < g.n; ++j) {
      double sum = 0.0, magnitude = 0.0;
      for (int l = 0; l < g.k; ++l) {
        const double t =
            static_cast<double>(g.a[i * g.a_row_stride + l * g.a_col_stride]) * g.b[l * g.ldb + j];
        sum += t;
        magnitude += std::fabs(t);
      }
      const double bias = g.epilogue.row_bias != nullptr ? g.epilogue.row_bias[i] : 0.0;
      sum += bias;
      // One more rounding for the bias, and twice the rounding for a CPU without fused multiply-adds.
      const double bound = gamma_n(2 * g.k + 1) * (magnitude + std::fabs(bias));
      // ReLU and the mask are exact: applied to an error band, they shrink it.
      if (g.epilogue.activation == mnistdp::Activation::relu && sum < 0.0) sum = 0.0;
      if (g.epilogue.mask != nullptr && g.epilogue.mask[i * g.epilogue.mask_stride + j] <= 0.0f) sum = 0.0;
      e.value[sz(i, g.n) + j] = sum;
      e.bound[sz(i, g.n) + j] = bound;
    }
  return e;
}

// Every element of C within its bound; NaN (an element left poisoned) fails.
void require_within(const std::vector<float>& c, const Exact& e, const std::string& what) {
  std::size_t worst = 0;
  double worst_ratio = 0.0;
  for (std::size_t j = 0; j < c.size(); ++j) {
    const double err = std::fabs(static_cast<double>(c[j]) - e.value[j]);
    const double ratio = !(err <= e.bound[j]) ? std::numeric_limits<double>::infinity()
                         : e.bound[j] > 0.0   ? err / e.bound[j]
                                              : 0.0;
    if (ratio > worst_ratio) worst_ratio = ratio, worst = j;
  }
  INFO(what << ": element " << worst << " is " << (c.empty() ? 0.0f : c[worst]) << ", exactly "
            << (c.empty() ? 0.0 : e.value[worst]) << ", bound " << (c.empty() ? 0.0 : e.bound[worst]));
  REQUIRE(worst_ratio <= 1.0);
}

std::string shape_name(int m, int n, int k) {
  return "m " + std::to_string(m) + ", n " + std::to_string(n) + ", k " + std::to_string(k);
}

// The products of a step and shapes around every tile edge: rows 1-7 and 13 (tiles of 4 and 6), columns that
// leave partial vectors of 4, 8 and 16 lanes and partial blocks, k in one pass and past the deepest (1,024),
// in two, the partial sums waiting in C between them.
void check_gemm(Isa isa) {
  std::mt19937 rng(2026);
  const int ms[] = {1, 5, 6, 7, 13, 256};
  const int ns[] = {1, 3, 10, 17, 64, 65, 100};
  const int ks[] = {0, 1, 10, 64, 129, 784, 1100};
  for (const int m : ms)
    for (const int n : ns)
      for (const int k : ks) {
        INFO(shape_name(m, n, k));
        const auto a = random_vec(rng, sz(m, k));
        const auto b = random_vec(rng, sz(k, n));
        const auto bias = random_vec(rng, static_cast<std::size_t>(m));
        auto mask = random_vec(rng, sz(m, n));
        for (float& v : mask)
          v = v < 0.0f ? 0.0f : v;  // a ReLU's output: half of it exact zeros
        for (const bool a_transposed : {false, true}) {
          for (int epilogue = 0; epilogue < 3; ++epilogue) {
            mnistdp::cpu::Gemm g;
            g.m = m, g.n = n, g.k = k;
            g.a = a.data();
            g.a_row_stride = a_transposed ? 1 : k;  // a as [k, m], read transposed
            g.a_col_stride = a_transposed ? m : 1;
            g.b = b.data(), g.ldb = n;
            std::vector<float> c(sz(m, n), kNaN);
            g.c = c.data(), g.ldc = n;
            if (epilogue == 1)
              g.epilogue.row_bias = bias.data(), g.epilogue.activation = mnistdp::Activation::relu;
            if (epilogue == 2) g.epilogue.mask = mask.data(), g.epilogue.mask_stride = n;
            mnistdp::cpu::gemm(isa, g);
            INFO("A " << (a_transposed ? "transposed" : "by rows") << ", epilogue "
                      << (epilogue == 0   ? "none"
                          : epilogue == 1 ? "bias and ReLU"
                                          : "mask"));
            require_within(c, exact_product(g), "C");
          }
        }
      }
}

// Each element of C is one accumulator in k order, so C must not depend on where a call's rows or columns
// start: the product of a whole matrix equals, to the bit, the products of its pieces.
void check_pieces(Isa isa) {
  std::mt19937 rng(7);
  const int m = 29, n = 83, k = 300;
  const auto a = random_vec(rng, sz(m, k));
  const auto b = random_vec(rng, sz(k, n));
  const auto bias = random_vec(rng, static_cast<std::size_t>(m));
  const auto product = [&](int row0, int rows, int col0, int cols, std::vector<float>& c) {
    mnistdp::cpu::Gemm g;
    g.m = rows, g.n = cols, g.k = k;
    g.a = a.data() + sz(row0, k), g.a_row_stride = k, g.a_col_stride = 1;
    g.b = b.data() + col0, g.ldb = n;
    g.c = c.data() + sz(row0, n) + static_cast<std::size_t>(col0), g.ldc = n;
    g.epilogue.row_bias = bias.data() + row0;
    g.epilogue.activation = mnistdp::Activation::relu;
    mnistdp::cpu::gemm(isa, g);
  };
  std::vector<float> whole(sz(m, n), kNaN), pieces(sz(m, n), kNaN);
  product(0, m, 0, n, whole);
  product(0, 11, 0, 37, pieces);
  product(0, 11, 37, n - 37, pieces);
  product(11, m - 11, 0, 5, pieces);
  product(11, m - 11, 5, n - 5, pieces);
  REQUIRE(std::memcmp(whole.data(), pieces.data(), whole.size() * sizeof(float)) == 0);
}

// The SGD epilogue against the product stored and then ref::sgd_step: the same bits, for tiles cut at every
// edge, k in one pass and in several, with and without weight decay, the parameters with a row stride of
// their own; C, left undefined, is not compared.
void check_sgd_epilogue(Isa isa) {
  std::mt19937 rng(11);
  for (const int m : {1, 7, 29})
    for (const int n : {1, 17, 83})
      for (const int k : {1, 64, 300, 1100})
        for (const float weight_decay : {0.0f, 0.01f}) {
          const auto a = random_vec(rng, sz(m, k));
          const auto b = random_vec(rng, sz(k, n));
          const int stride = n + 3;
          const auto params = random_vec(rng, sz(m, stride));
          mnistdp::cpu::Gemm g;
          g.m = m, g.n = n, g.k = k;
          g.a = a.data(), g.a_row_stride = k, g.a_col_stride = 1;
          g.b = b.data(), g.ldb = n;
          std::vector<float> gradient(sz(m, n), kNaN);
          g.c = gradient.data(), g.ldc = n;
          mnistdp::cpu::gemm(isa, g);
          mnistdp::SgdConfig cfg;
          cfg.lr = 0.05f;
          cfg.weight_decay = weight_decay;
          auto expected = params;
          for (int i = 0; i < m; ++i)
            mnistdp::ref::sgd_step(expected.data() + sz(i, stride), gradient.data() + sz(i, n), nullptr,
                                   static_cast<std::size_t>(n), cfg, false);

          auto fused = params;
          std::vector<float> scratch(sz(m, n), kNaN);
          g.c = scratch.data();
          g.epilogue.sgd_params = fused.data(), g.epilogue.sgd_stride = stride;
          g.epilogue.sgd_lr = cfg.lr, g.epilogue.sgd_weight_decay = weight_decay;
          mnistdp::cpu::gemm(isa, g);
          INFO(m << " x " << n << " x " << k << ", weight decay " << weight_decay);
          REQUIRE(std::memcmp(fused.data(), expected.data(), fused.size() * sizeof(float)) == 0);
        }
}

// The epilogue's edge values, where no rounding happens (k = 1, A = 1): every version equals ref:: to the
// bit, NaN passing through ReLU and a NaN mask keeping its value, as in torch.relu and threshold_backward.
void check_edges(Isa isa) {
  const std::vector<float> values{-2.0f,
                                  -0.0f,
                                  0.0f,
                                  1.5f,
                                  kNaN,
                                  -kNaN,
                                  3.0f,
                                  -1e-30f,
                                  1e30f,
                                  -1e30f,
                                  std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity(),
                                  0.25f,
                                  -0.25f,
                                  7.0f,
                                  -7.0f,
                                  0.5f};
  const int n = static_cast<int>(values.size());
  const float one = 1.0f;
  for (const bool relu : {false, true}) {
    const auto act = relu ? mnistdp::Activation::relu : mnistdp::Activation::identity;
    // ref:: as a layer with in = 1: y[i, 0] = x[i] * 1 + b, b = 0... written with bias 0 and the values in B.
    mnistdp::cpu::Gemm g;
    g.m = 1, g.n = n, g.k = 1;
    g.a = &one, g.a_row_stride = 1, g.a_col_stride = 1;
    g.b = values.data(), g.ldb = n;
    std::vector<float> c(static_cast<std::size_t>(n), 1234.0f);
    g.c = c.data(), g.ldc = n;
    const float zero_bias = 0.0f;
    g.epilogue.row_bias = &zero_bias;
    g.epilogue.activation = act;
    mnistdp::cpu::gemm(isa, g);
    std::vector<float> want(static_cast<std::size_t>(n), 1234.0f);
    const float w = 1.0f;
    mnistdp::ref::linear_forward(values.data(), &w, &zero_bias, want.data(), {n, 1, 1}, act);
    INFO("relu " << relu);
    REQUIRE(std::memcmp(c.data(), want.data(), c.size() * sizeof(float)) == 0);
  }
  // The mask: dx = dy w where x > 0 (x the mask), with dy = 1 and w = the values.
  std::vector<float> mask = values;
  std::vector<float> c(static_cast<std::size_t>(n), 1234.0f);
  mnistdp::cpu::Gemm g;
  g.m = 1, g.n = n, g.k = 1;
  g.a = &one, g.a_row_stride = 1, g.a_col_stride = 1;
  std::vector<float> ones(static_cast<std::size_t>(n), 1.0f);
  g.b = ones.data(), g.ldb = n;
  g.c = c.data(), g.ldc = n;
  g.epilogue.mask = mask.data();
  g.epilogue.mask_stride = n;
  mnistdp::cpu::gemm(isa, g);
  for (int j = 0; j < n; ++j) {
    INFO("mask " << mask[static_cast<std::size_t>(j)]);
    REQUIRE(c[static_cast<std::size_t>(j)] == (mask[static_cast<std::size_t>(j)] <= 0.0f ? 0.0f : 1.0f));
  }
}

// An activation the product's epilogue has no vector form of (GELU), applied by cpu::linear_forward and
// cpu::input_gradient in a pass of their own: against ref:: to the bit in the portable version, which rounds
// the product as ref:: does; elsewhere, as the same scalar function applied to the product without
// activation, whose own bound check_layer has checked. Each output poisoned before the call, every element
// checked.
void check_layer_without_vector_form(Isa isa, LinearShape s, const std::vector<float>& w,
                                     const std::vector<float>& b, const std::vector<float>& xT,
                                     const std::vector<float>& dyT) {
  using mnistdp::Activation;
  using Gelu = mnistdp::ActivationFn<Activation::gelu>;
  const auto x = transposed(xT, s.in, s.batch);
  const auto dy = transposed(dyT, s.out, s.batch);
  std::vector<float> plainT(sz(s.out, s.batch), kNaN), yT(plainT.size(), kNaN), zT(plainT.size(), kNaN);
  mnistdp::cpu::linear_forward(isa, w.data(), b.data(), xT.data(), plainT.data(), s, Activation::identity);
  mnistdp::cpu::linear_forward(isa, w.data(), b.data(), xT.data(), yT.data(), s, Activation::gelu, zT.data());
  REQUIRE(zT == plainT);
  for (std::size_t j = 0; j < yT.size(); ++j) {
    const float want = Gelu::forward(zT[j]);
    REQUIRE(std::memcmp(&yT[j], &want, sizeof(float)) == 0);
  }
  // Without zT to keep, the activation applied in place: the same y.
  std::vector<float> in_place(yT.size(), kNaN);
  mnistdp::cpu::linear_forward(isa, w.data(), b.data(), xT.data(), in_place.data(), s, Activation::gelu);
  REQUIRE(in_place == yT);
  std::vector<float> y_ref(sz(s.batch, s.out), kNaN), z_ref(y_ref.size(), kNaN);
  mnistdp::ref::linear_forward(x.data(), w.data(), b.data(), y_ref.data(), s, Activation::gelu, z_ref.data());
  if (isa == Isa::portable) {
    REQUIRE(transposed(yT, s.out, s.batch) == y_ref);
    REQUIRE(transposed(zT, s.out, s.batch) == z_ref);
  }

  // The input gradient: GELU's derivative read from z (here x itself, any values do).
  std::vector<float> dx_plainT(sz(s.in, s.batch), kNaN), dxT(dx_plainT.size(), kNaN);
  mnistdp::cpu::input_gradient(isa, w.data(), dyT.data(), xT.data(), nullptr, dx_plainT.data(), s,
                               Activation::identity);
  mnistdp::cpu::input_gradient(isa, w.data(), dyT.data(), nullptr, xT.data(), dxT.data(), s,
                               Activation::gelu);
  for (std::size_t j = 0; j < dxT.size(); ++j) {
    const float want = Gelu::backward(dx_plainT[j], xT[j]);
    REQUIRE(std::memcmp(&dxT[j], &want, sizeof(float)) == 0);
  }
  if (isa == Isa::portable) {
    std::vector<float> dw(sz(s.out, s.in)), db(static_cast<std::size_t>(s.out)), dx_ref(sz(s.batch, s.in));
    mnistdp::ref::linear_backward(dy.data(), x.data(), w.data(), dw.data(), db.data(), dx_ref.data(), s,
                                  Activation::gelu, x.data());
    REQUIRE(transposed(dxT, s.in, s.batch) == dx_ref);
  }
  // A pre-activation asked of an activation that keeps none is refused, not left unwritten.
  if (!zT.empty())
    REQUIRE_THROWS_AS(mnistdp::cpu::linear_forward(isa, w.data(), b.data(), xT.data(), yT.data(), s,
                                                   Activation::relu, zT.data()),
                      std::invalid_argument);
}

// The layer's four operations against ref:: on the same data (the activations turned feature-major). The bias
// gradients are sums in ref::'s order in every version, so equal to the bit; in the portable version, whose
// every product and sum is rounded as ref:: rounds it, everything is.
void check_layer(Isa isa, LinearShape s) {
  INFO("batch " << s.batch << ", in " << s.in << ", out " << s.out);
  std::mt19937 rng(static_cast<unsigned>(s.batch * 1000003 + s.in * 1009 + s.out));
  const auto w = random_vec(rng, sz(s.out, s.in));
  const auto b = random_vec(rng, static_cast<std::size_t>(s.out));
  const auto dy = random_vec(rng, sz(s.batch, s.out));
  auto x = random_vec(rng, sz(s.batch, s.in));
  for (float& e : x)
    e = e < 0.0f ? 0.0f : e;  // a ReLU's output, so that the mask has something to do
  const auto xT = transposed(x, s.batch, s.in);
  const auto dyT = transposed(dy, s.batch, s.out);
  const std::vector<float> ones(static_cast<std::size_t>(s.batch), 1.0f);
  const bool exact = isa == Isa::portable;

  for (const bool relu : {false, true}) {
    const auto act = relu ? mnistdp::Activation::relu : mnistdp::Activation::identity;
    std::vector<float> y_ref(sz(s.batch, s.out), kNaN), yT(sz(s.out, s.batch), kNaN);
    mnistdp::ref::linear_forward(x.data(), w.data(), b.data(), y_ref.data(), s, act);
    mnistdp::cpu::linear_forward(isa, w.data(), b.data(), xT.data(), yT.data(), s, act);
    const auto y = transposed(yT, s.out, s.batch);
    // Split by the batch's columns instead of the outputs' rows: the same bits, every element written.
    for (const int parts : {1, 2, 3}) {
      std::vector<float> by_columns(yT.size(), kNaN);
      for (int index = 0; index < parts; ++index)
        mnistdp::cpu::linear_forward_by_columns(isa, w.data(), b.data(), xT.data(), by_columns.data(), s, act,
                                                nullptr, {index, parts});
      INFO(parts << " parts by columns");
      REQUIRE(by_columns == yT);
    }
    if (exact) {
      REQUIRE(y == y_ref);
    } else {
      mnistdp::cpu::Gemm g;  // the same product as exact_product sees it
      g.m = s.out, g.n = s.batch, g.k = s.in;
      g.a = w.data(), g.a_row_stride = s.in, g.a_col_stride = 1;
      g.b = xT.data(), g.ldb = s.batch;
      g.epilogue.row_bias = b.data();
      g.epilogue.activation = act;
      require_within(yT, exact_product(g), "yT");
    }
  }

  std::vector<float> dw_ref(sz(s.out, s.in), kNaN), db_ref(static_cast<std::size_t>(s.out), kNaN);
  std::vector<float> dx_ref(sz(s.batch, s.in), kNaN);
  mnistdp::ref::linear_backward(dy.data(), x.data(), w.data(), dw_ref.data(), db_ref.data(), dx_ref.data(), s,
                                mnistdp::Activation::relu);
  mnistdp::cpu::Gemm dw_product;  // dw = dyT x
  dw_product.m = s.out, dw_product.n = s.in, dw_product.k = s.batch;
  dw_product.a = dyT.data(), dw_product.a_row_stride = s.batch, dw_product.a_col_stride = 1;
  dw_product.b = x.data(), dw_product.ldb = s.in;
  const Exact dw_exact = exact_product(dw_product);

  {
    std::vector<float> dw(sz(s.out, s.in), kNaN), db(static_cast<std::size_t>(s.out), kNaN);
    mnistdp::cpu::weight_gradient(isa, dyT.data(), x.data(), ones.data(), dw.data(), db.data(), s);
    REQUIRE(db == db_ref);
    if (exact)
      REQUIRE(dw == dw_ref);
    else
      require_within(dw, dw_exact, "dw");
  }
  {
    std::vector<float> dw(sz(s.out, s.in), kNaN), db(static_cast<std::size_t>(s.out), kNaN);
    std::vector<float> scratch(sz(s.in, s.out), kNaN);
    mnistdp::cpu::weight_gradient_from_transposed(isa, xT.data(), dy.data(), ones.data(), scratch.data(),
                                                  dw.data(), db.data(), s);
    REQUIRE(db == db_ref);
    if (exact)
      REQUIRE(dw == dw_ref);
    else
      require_within(dw, dw_exact, "dw from transposed");
  }
  for (const bool relu_mask : {false, true}) {
    const auto act = relu_mask ? mnistdp::Activation::relu : mnistdp::Activation::identity;
    std::vector<float> dx_want(sz(s.batch, s.in), kNaN);
    std::vector<float> dw_unused(sz(s.out, s.in)), db_unused(static_cast<std::size_t>(s.out));
    mnistdp::ref::linear_backward(dy.data(), x.data(), w.data(), dw_unused.data(), db_unused.data(),
                                  dx_want.data(), s, act);
    std::vector<float> dxT(sz(s.in, s.batch), kNaN);
    mnistdp::cpu::input_gradient(isa, w.data(), dyT.data(), xT.data(), nullptr, dxT.data(), s, act);
    const auto dx = transposed(dxT, s.in, s.batch);
    INFO("relu_mask " << relu_mask);
    if (exact) {
      REQUIRE(dx == dx_want);
    } else {
      mnistdp::cpu::Gemm g;  // dxT = w^T dyT
      g.m = s.in, g.n = s.batch, g.k = s.out;
      g.a = w.data(), g.a_row_stride = 1, g.a_col_stride = s.in;
      g.b = dyT.data(), g.ldb = s.batch;
      if (relu_mask) g.epilogue.mask = xT.data(), g.epilogue.mask_stride = s.batch;
      require_within(dxT, exact_product(g), "dxT");
    }
  }
  check_layer_without_vector_form(isa, s, w, b, xT, dyT);
}

void check_layers(Isa isa) {
  // Shard sizes of a 64-row batch on 1, 2, 3 and 8 replicas, an evaluation chunk, odd sizes and no rows at
  // all, for fc1 (784 -> 256), fc2 (256 -> 10) and odd layers.
  for (const int batch : {0, 1, 7, 8, 22, 32, 64, 65, 500})
    for (const LinearShape shape : {LinearShape{batch, 784, 256}, LinearShape{batch, 256, 10},
                                    LinearShape{batch, 33, 1}, LinearShape{batch, 1, 33}})
      check_layer(isa, shape);
}

// Every element in place, whatever the shape's remainders against the 16- and 8-wide blocks and however the
// columns are split among parts; the output starts as NaN, so an element no part writes fails.
void check_transpose(Isa isa) {
  std::mt19937 rng(3);
  for (const int rows : {0, 1, 7, 8, 9, 15, 16, 17, 33, 64, 100})
    for (const int cols : {1, 8, 10, 16, 17, 33, 48, 784})
      for (const int parts : {1, 2, 3}) {
        const auto m = random_vec(rng, sz(rows, cols));
        std::vector<float> t(m.size(), kNaN);
        for (int index = 0; index < parts; ++index)
          mnistdp::cpu::transpose(isa, m.data(), t.data(), rows, cols, {index, parts});
        INFO(rows << " x " << cols << " in " << parts << " parts");
        REQUIRE(t == transposed(m, rows, cols));
      }
}

}  // namespace

TEST_CASE("cpu::best_isa names a version this CPU runs", "[kernels][cpu_gemm]") {
  const Isa best = mnistdp::cpu::best_isa();
  INFO(mnistdp::cpu::isa_name(best));
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f"))
    REQUIRE(best == Isa::avx512);
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    REQUIRE(best == Isa::avx2);
  else
    REQUIRE(best == Isa::portable);
#else
  REQUIRE(best == Isa::portable);
#endif
}

namespace {
int version_avx512() {
  return 512;
}
int version_avx2() {
  return 2;
}
int version_portable() {
  return 0;
}
}  // namespace

TEST_CASE("cpu::version picks the instruction set's version and names what a build lacks",
          "[kernels][cpu_gemm]") {
  using mnistdp::cpu::version;
  using mnistdp::cpu::Versions;
  const Versions<int()> all{&version_avx512, &version_avx2, &version_portable};
  CHECK(version(Isa::avx512, "op", all)() == 512);
  CHECK(version(Isa::avx2, "op", all)() == 2);
  CHECK(version(Isa::portable, "op", all)() == 0);
  // What a build for another CPU holds: no x86-64 versions.
  const Versions<int()> portable_only{nullptr, nullptr, &version_portable};
  CHECK(version(Isa::portable, "op", portable_only)() == 0);
  CHECK_THROWS_WITH(version(Isa::avx512, "cpu::op", portable_only),
                    "cpu::op: this build has no AVX-512 version");
  CHECK_THROWS_WITH(version(Isa::avx2, "cpu::op", portable_only),
                    "cpu::op: this build has no AVX2+FMA version");
  CHECK_THROWS_WITH(version(static_cast<Isa>(7), "cpu::op", all), "cpu::op: unknown instruction set");
  // An operation whose caller has a plain loop of its own may have no portable version.
  const Versions<int()> vectors_only{&version_avx512, &version_avx2, nullptr};
  CHECK(version(Isa::portable, "op", vectors_only) == nullptr);
}

#define MNISTDP_CPU_GEMM_TESTS(ISA, NAME)                                                              \
  TEST_CASE("cpu::gemm (" NAME ") is within the rounding bound of the exact product, every tile edge", \
            "[kernels][cpu_gemm]") {                                                                   \
    skip_unless_supported(ISA);                                                                        \
    check_gemm(ISA);                                                                                   \
  }                                                                                                    \
  TEST_CASE("cpu::gemm (" NAME ") gives a matrix's product and its pieces' the same bits",             \
            "[kernels][cpu_gemm]") {                                                                   \
    skip_unless_supported(ISA);                                                                        \
    check_pieces(ISA);                                                                                 \
  }                                                                                                    \
  TEST_CASE("cpu::gemm (" NAME ") treats NaN, -0 and infinities in its epilogue as ref:: does",        \
            "[kernels][cpu_gemm]") {                                                                   \
    skip_unless_supported(ISA);                                                                        \
    check_edges(ISA);                                                                                  \
  }                                                                                                    \
  TEST_CASE("cpu:: linear layer (" NAME ") agrees with ref::, feature-major", "[kernels][cpu_gemm]") { \
    skip_unless_supported(ISA);                                                                        \
    check_layers(ISA);                                                                                 \
  }                                                                                                    \
  TEST_CASE("cpu::gemm (" NAME ") applies SGD in its epilogue as ref::sgd_step does",                  \
            "[kernels][cpu_gemm]") {                                                                   \
    skip_unless_supported(ISA);                                                                        \
    check_sgd_epilogue(ISA);                                                                           \
  }                                                                                                    \
  TEST_CASE("cpu::transpose (" NAME ") turns rows into columns", "[kernels][cpu_gemm]") {              \
    skip_unless_supported(ISA);                                                                        \
    check_transpose(ISA);                                                                              \
  }

MNISTDP_CPU_GEMM_TESTS(Isa::avx512, "AVX-512")
MNISTDP_CPU_GEMM_TESTS(Isa::avx2, "AVX2")
MNISTDP_CPU_GEMM_TESTS(Isa::portable, "portable")
