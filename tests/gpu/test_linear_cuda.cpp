// The linear layer on the device, with every GEMM version and cuBLAS, against ref::linear_forward and
// ref::linear_backward, on shapes that are not multiples of any tile (see gpu_test_util.hpp for the error
// norm).
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cuda/gemm/gemm.hpp"
#include "kernels/cuda/ops/linear.hpp"
#include "kernels/ref/linear.hpp"
#include "tests/gpu/gpu_test_util.hpp"

using namespace mnistdp;
using namespace mnistdp::gpu_test;

namespace {

constexpr double kTolerance = 1e-5;
const std::vector<GemmImpl> kImpls = all_gemms();

// max |got - want| over max |scale|: the error of an output measured against the size of what it was computed
// from; infinity on a size mismatch or any NaN in got.
double normwise_error(const std::vector<float>& got, const std::vector<float>& want,
                      const std::vector<float>& scale) {
  if (got.size() != want.size() || scale.size() != want.size())
    return std::numeric_limits<double>::infinity();
  double max_diff = 0.0, max_scale = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return std::numeric_limits<double>::infinity();
    max_diff = std::fmax(max_diff, std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
    max_scale = std::fmax(max_scale, std::fabs(static_cast<double>(scale[i])));
  }
  if (max_scale == 0.0) return max_diff == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return max_diff / max_scale;
}

// A linear layer's random operands (x of both signs, so that the ReLU mask cuts about half of dx), the
// reference's outputs without activation and with `act`, and the operands on the device. GELU's backward
// reads x as its pre-activation z (any values do for the check of the kernel).
struct LinearCase {
  LinearShape shape;
  std::vector<float> x, w, b, dy;    // [batch, in], [out, in], [out], [batch, out]
  std::vector<float> y, dw, db, dx;  // ref::linear_forward and ref::linear_backward without activation
  // The same with `act`: y = act(x w^T + b), dx times act' read from x.
  std::vector<float> y_act, dx_act;
  DeviceBuffer<float> d_x, d_w, d_b, d_dy;

  LinearCase(int batch, int in, int out, std::uint64_t seed, Activation act = Activation::identity)
      : shape{batch, in, out} {
    const auto nb = static_cast<std::size_t>(batch);
    const auto ni = static_cast<std::size_t>(in);
    const auto no = static_cast<std::size_t>(out);
    Rng rng(seed);
    x = random_floats(nb * ni, rng);
    w = random_floats(no * ni, rng);
    b = random_floats(no, rng);
    dy = random_floats(nb * no, rng);
    y.resize(nb * no);
    dw.resize(no * ni);
    db.resize(no);
    dx.resize(nb * ni);
    ref::linear_forward(x.data(), w.data(), b.data(), y.data(), shape, Activation::identity);
    ref::linear_backward(dy.data(), x.data(), w.data(), dw.data(), db.data(), dx.data(), shape,
                         Activation::identity);
    y_act = y;
    dx_act = dx;
    if (act != Activation::identity) {
      ref::linear_forward(x.data(), w.data(), b.data(), y_act.data(), shape, act);
      ref::linear_backward(dy.data(), x.data(), w.data(), dw.data(), db.data(), dx_act.data(), shape, act,
                           x.data());
    }
    d_x = to_device(x);
    d_w = to_device(w);
    d_b = to_device(b);
    d_dy = to_device(dy);
  }

  // Device buffers for the outputs, uninitialised: y [batch, out], dw [out, in], db [out], dx [batch, in].
  struct Outputs {
    DeviceBuffer<float> y, dw, db, dx;
  };
  Outputs outputs() const {
    const auto nb = static_cast<std::size_t>(shape.batch);
    const auto ni = static_cast<std::size_t>(shape.in);
    const auto no = static_cast<std::size_t>(shape.out);
    return {DeviceBuffer<float>(nb * no), DeviceBuffer<float>(no * ni), DeviceBuffer<float>(no),
            DeviceBuffer<float>(nb * ni)};
  }
};

}  // namespace

namespace {
// The shapes of the layer's tests: batch sizes and feature counts on both sides of every tile's edge.
const std::vector<int> kLinearBatches{0, 1, 7, 21, 22, 64, 65};
std::vector<int> linear_features() {
  return gpu_test::sweep({1, 10, 33, 256, 784}, {1, 10, 33, 100});
}
}  // namespace

TEST_CASE("linear forward and backward match the reference with every GEMM", "[gpu][linear]") {
  const int batch = GENERATE(from_range(kLinearBatches));
  const int in = GENERATE(from_range(linear_features()));
  const int out = GENERATE(from_range(linear_features()));
  // No activation or one of the table's, in turn across the shapes: every activation with every GEMM, every
  // batch size and every feature count.
  const int a = in_turn(1 + static_cast<int>(kActivations.size()),
                        {{kLinearBatches, batch}, {linear_features(), in}, {linear_features(), out}}) -
                1;
  const Activation act = a < 0 ? Activation::identity : kActivations[static_cast<std::size_t>(a)].id;
  CAPTURE(batch, in, out, activation_name(act));
  const LinearCase c(batch, in, out,
                     static_cast<std::uint64_t>(batch) * 1000003u + static_cast<std::uint64_t>(in) * 1009u +
                         static_cast<std::uint64_t>(out),
                     act);
  const LinearShape s = c.shape;
  auto [d_y, d_dw, d_db, d_dx] = c.outputs();
  DeviceBuffer<float> d_z(d_y.size());
  Stream stream;
  CublasHandle cublas(stream.get());

  for (GemmImpl impl : kImpls) {
    CAPTURE(gemm_impl_name(impl));
    const cuda::GemmContext ctx{impl, stream.get(), cublas.get()};

    // The pre-activation z kept where the activation's derivative reads it, and then equal to the product
    // without activation.
    {
      poison(d_y);
      poison(d_z);
      float* z = keeps_pre_activation(act) ? d_z.data() : nullptr;
      cuda::linear_forward(c.d_x.data(), c.d_w.data(), c.d_b.data(), d_y.data(), s, act, ctx, z);
      // GELU's output is measured against the scale of its input z: near its lower tail gelu(z) is a small
      // difference, 0.5 z (1 + erf(z / sqrt 2)), so erff's documented 2 ulps (2^-23 near erf = -1, as an
      // H200 and the emulated device give it) move it by up to |z| 2^-24 however small it is, and the
      // product's own rounding reaches it through a slope of at most 1.13. ReLU's output keeps its own norm.
      const bool against_input = keeps_pre_activation(act);
      CHECK((against_input ? normwise_error(to_host(d_y), c.y_act, c.y)
                           : max_rel_error(to_host(d_y), c.y_act)) <= kTolerance);
      if (z != nullptr) CHECK(max_rel_error(to_host(d_z), c.y) <= kTolerance);

      poison(d_dw);
      poison(d_db);
      poison(d_dx);
      cuda::linear_backward(c.d_dy.data(), c.d_x.data(), c.d_w.data(), d_dw.data(), d_db.data(), d_dx.data(),
                            s, act, ctx, c.d_x.data());
      CHECK(max_rel_error(to_host(d_dw), c.dw) <= kTolerance);
      CHECK(max_rel_error(to_host(d_db), c.db) <= kTolerance);
      // GELU's derivative likewise against dy w, the gradient it scales (its erff and expf terms are off by
      // about 1e-7 of it at most).
      CHECK((against_input ? normwise_error(to_host(d_dx), c.dx_act, c.dx)
                           : max_rel_error(to_host(d_dx), c.dx_act)) <= kTolerance);
    }

    // fc1's backward: no dx, which must then be left untouched.
    poison(d_dw);
    poison(d_db);
    poison(d_dx);
    cuda::linear_backward(c.d_dy.data(), c.d_x.data(), c.d_w.data(), d_dw.data(), d_db.data(), nullptr, s,
                          Activation::identity, ctx);
    CHECK(max_rel_error(to_host(d_dw), c.dw) <= kTolerance);
    CHECK(max_rel_error(to_host(d_db), c.db) <= kTolerance);
    const auto dx_after = to_host(d_dx);
    CHECK(std::all_of(dx_after.begin(), dx_after.end(), [](float v) { return std::isnan(v); }));
  }
}

TEST_CASE("cuBLAS in TF32 stays within TF32's rounding of the reference", "[gpu][linear][tf32]") {
  // TF32 keeps 10 of fp32's 23 bits of mantissa: each input is off by up to 2^-11 of itself, each product by
  // about 2^-10, and the sums stay in fp32. With inputs of both signs the normwise error (gpu_test_util.hpp)
  // then stays near 2^-10, about 1e-3; 5e-3 leaves room for how the sums grow. The error is printed: it is
  // what the option costs in precision, beside the accuracy that scripts/gpu-session.sh trains to.
  constexpr double kTf32Tolerance = 5e-3;
  const int batch = GENERATE(21, 64);
  const int in = GENERATE(33, 256, 784);
  const int out = GENERATE(10, 65, 256);
  CAPTURE(batch, in, out);
  const LinearCase c(batch, in, out,
                     static_cast<std::uint64_t>(batch) * 7919u + static_cast<std::uint64_t>(in) * 31u +
                         static_cast<std::uint64_t>(out));
  const LinearShape s = c.shape;
  auto [d_y, d_dw, d_db, d_dx] = c.outputs();
  Stream stream;
  CublasHandle tf32(stream.get(), /*tf32=*/true);
  const cuda::GemmContext ctx{GemmImpl::cublas, stream.get(), tf32.get()};
  poison(d_y);
  poison(d_dw);
  poison(d_db);
  poison(d_dx);
  cuda::linear_forward(c.d_x.data(), c.d_w.data(), c.d_b.data(), d_y.data(), s, Activation::identity, ctx);
  cuda::linear_backward(c.d_dy.data(), c.d_x.data(), c.d_w.data(), d_dw.data(), d_db.data(), d_dx.data(), s,
                        Activation::identity, ctx);
  const double error_y = max_rel_error(to_host(d_y), c.y);
  const double error_dw = max_rel_error(to_host(d_dw), c.dw);
  const double error_dx = max_rel_error(to_host(d_dx), c.dx);
  WARN(fmt::format("TF32 normwise error at batch {}, {} -> {}: y {:.2e}, dW {:.2e}, dx {:.2e}", batch, in,
                   out, error_y, error_dw, error_dx));
  CHECK(error_y <= kTf32Tolerance);
  CHECK(error_dw <= kTf32Tolerance);
  CHECK(error_dx <= kTf32Tolerance);
  // The bias gradient is a column sum, never a product: fp32 as ever.
  CHECK(max_rel_error(to_host(d_db), c.db) <= kTolerance);
}

namespace {
const std::vector<int> kGemmRows{1, 22, 64, 65};
std::vector<int> gemm_columns() {
  return gpu_test::sweep({10, 256, 300}, {10, 300});
}
std::vector<int> gemm_depths() {
  return gpu_test::sweep({10, 64, 784, 1000}, {10, 64, 100});
}
}  // namespace

TEST_CASE("the hand-written GEMMs give the same bits", "[gpu][linear]") {
  // Each sums every element of C in one thread, k ascending, with fused multiply-adds from 0, then the
  // epilogue: the same operations in the same order, whatever the tiling. (cuBLAS is not held to this.)
  const int m = GENERATE(from_range(kGemmRows));
  const int n = GENERATE(from_range(gemm_columns()));
  const int k = GENERATE(from_range(gemm_depths()));
  // With no epilogue the raw sums are compared; with the bias and an activation's derivative, their order
  // too: no epilogue or one of the table's activations, in turn across the shapes, each with every m, n
  // and k.
  const int activation = in_turn(1 + static_cast<int>(kActivations.size()),
                                 {{kGemmRows, m}, {gemm_columns(), n}, {gemm_depths(), k}}) -
                         1;
  const bool epilogue = activation >= 0;
  CAPTURE(m, n, k, epilogue ? kActivations[static_cast<std::size_t>(activation)].name : "none");
  Rng rng(static_cast<std::uint64_t>(m) * 7907u + static_cast<std::uint64_t>(n) * 101u +
          static_cast<std::uint64_t>(k));
  const auto nm = static_cast<std::size_t>(m), nn = static_cast<std::size_t>(n),
             nk = static_cast<std::size_t>(k);
  const auto d_a = to_device(random_floats(nm * nk, rng));  // [m, k], or [k, m] transposed
  const auto d_b = to_device(random_floats(nk * nn, rng));  // [k, n], or [n, k] transposed
  const auto d_bias = to_device(random_floats(nn, rng));
  const auto d_mask = to_device(random_floats(nm * nn, rng));
  DeviceBuffer<float> d_c(nm * nn);
  Stream stream;
  for (const bool trans_a : {false, true}) {
    for (const bool trans_b : {false, true}) {
      CAPTURE(trans_a, trans_b);
      cuda::GemmProblem p;
      p.m = m;
      p.n = n;
      p.k = k;
      p.a = d_a.data();
      p.lda = trans_a ? m : k;
      p.trans_a = trans_a;
      p.b = d_b.data();
      p.ldb = trans_b ? k : n;
      p.trans_b = trans_b;
      p.c = d_c.data();
      p.ldc = n;
      p.bias = epilogue ? d_bias.data() : nullptr;
      p.activation = epilogue ? kActivations[static_cast<std::size_t>(activation)].id : Activation::identity;
      p.mask = epilogue ? d_mask.data() : nullptr;
      std::vector<float> first;
      for (GemmImpl impl : gemms_with_common_bits()) {
        CAPTURE(gemm_impl_name(impl));
        poison(d_c);
        cuda::gemm(p, impl, stream.get(), nullptr);
        const auto c = to_host(d_c);
        if (first.empty()) {
          first = c;
          CHECK(std::none_of(first.begin(), first.end(), [](float v) { return std::isnan(v); }));
        } else {
          CHECK(bitwise_equal(c, first));
        }
      }
    }
  }
}

TEST_CASE("linear backward of an empty batch gives zero gradients with every GEMM", "[gpu][linear]") {
  const LinearShape s{0, 784, 256};
  DeviceBuffer<float> d_w(784 * 256), d_dw(784 * 256), d_db(256);
  CUDA_CHECK(cudaMemset(d_w.data(), 0, d_w.bytes()));
  CUDA_CHECK(cudaDeviceSynchronize());
  Stream stream;
  CublasHandle cublas(stream.get());
  for (GemmImpl impl : kImpls) {
    CAPTURE(gemm_impl_name(impl));
    poison(d_dw);
    poison(d_db);
    // With no rows, dy and x are empty: null pointers must not be read.
    cuda::linear_backward(nullptr, nullptr, d_w.data(), d_dw.data(), d_db.data(), nullptr, s,
                          Activation::identity, {impl, stream.get(), cublas.get()});
    const auto dw = to_host(d_dw);
    const auto db = to_host(d_db);
    CHECK(std::all_of(dw.begin(), dw.end(), [](float v) { return v == 0.0f; }));
    CHECK(std::all_of(db.begin(), db.end(), [](float v) { return v == 0.0f; }));
  }
}

TEST_CASE("every GEMM version is deterministic", "[gpu][linear]") {
  const LinearShape s{64, 784, 256};
  Rng rng(7);
  const auto d_x = to_device(random_floats(64 * 784, rng));
  const auto d_w = to_device(random_floats(256 * 784, rng));
  const auto d_dy = to_device(random_floats(64 * 256, rng));
  DeviceBuffer<float> d_dw(256 * 784), d_db(256);
  Stream stream;
  CublasHandle cublas(stream.get());
  for (GemmImpl impl : kImpls) {
    CAPTURE(gemm_impl_name(impl));
    const cuda::GemmContext ctx{impl, stream.get(), cublas.get()};
    cuda::linear_backward(d_dy.data(), d_x.data(), d_w.data(), d_dw.data(), d_db.data(), nullptr, s,
                          Activation::identity, ctx);
    const auto first = to_host(d_dw);
    poison(d_dw);
    cuda::linear_backward(d_dy.data(), d_x.data(), d_w.data(), d_dw.data(), d_db.data(), nullptr, s,
                          Activation::identity, ctx);
    CHECK(bitwise_equal(to_host(d_dw), first));
  }
}
