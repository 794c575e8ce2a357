// The fused classifier head (kernels/cuda/fused/classifier_head.hpp) against the plain path's launches, to
// the bit, and against the reference ops within the GPU tests' tolerance, on shapes that are not multiples of
// any tile, with every output poisoned before the launch, each hidden activation of the table in turn.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/fused/classifier_head.hpp"
#include "kernels/cuda/ops/linear.hpp"
#include "kernels/cuda/ops/softmax_xent.hpp"
#include "kernels/ref/linear.hpp"
#include "kernels/ref/softmax_xent.hpp"
#include "tests/gpu/gpu_test_util.hpp"

using namespace mnistdp;
using namespace mnistdp::gpu_test;

namespace {

constexpr double kTolerance = 1e-5;

struct HeadOutputs {
  std::vector<float> logits, dlogits, loss, dw, db, dh, dh_sums;
};

// The inputs of one case: h as fc1's activation leaves it (ReLU's about half exact zeros) and z, what it came
// from, where the activation's derivative reads it; fc2's parameters and labels.
struct HeadInputs {
  int batch, hidden, classes;
  Activation act;
  float grad_scale;
  std::vector<float> z, h, w, b;
  std::vector<std::uint8_t> labels;

  HeadInputs(int batch_, int hidden_, int classes_, Activation act_, Rng& rng)
      : batch(batch_),
        hidden(hidden_),
        classes(classes_),
        act(act_),
        grad_scale(1.0f / static_cast<float>(batch_ + 5)) {
    const auto nb = static_cast<std::size_t>(batch), nh = static_cast<std::size_t>(hidden),
               nc = static_cast<std::size_t>(classes);
    z = random_floats(nb * nh, rng, -3.0f, 3.0f);
    h.resize(z.size());
    with_activation(act, [&](auto id) {
      std::transform(z.begin(), z.end(), h.begin(), ActivationFn<decltype(id)::value>::forward);
    });
    if (!keeps_pre_activation(act)) z.clear();
    w = random_floats(nc * nh, rng);
    b = random_floats(nc, rng);
    labels = random_bytes(nb, rng, static_cast<std::uint32_t>(classes));
  }
};

struct DeviceOutputs {
  DeviceBuffer<float> logits, dlogits, loss, dw, db, dh, dh_sums;
  explicit DeviceOutputs(const HeadInputs& in)
      : logits(static_cast<std::size_t>(in.batch * in.classes)),
        dlogits(logits.size()),
        loss(1),
        dw(static_cast<std::size_t>(in.classes * in.hidden)),
        db(static_cast<std::size_t>(in.classes)),
        dh(static_cast<std::size_t>(in.batch * in.hidden)),
        dh_sums(static_cast<std::size_t>(in.hidden)) {
    for (auto* buffer : {&logits, &dlogits, &loss, &dw, &db, &dh, &dh_sums})
      poison(*buffer);
  }
  HeadOutputs to_host_all() const {
    return {to_host(logits), to_host(dlogits), to_host(loss),   to_host(dw),
            to_host(db),     to_host(dh),      to_host(dh_sums)};
  }
};

HeadOutputs reference(const HeadInputs& in) {
  const LinearShape fc2{in.batch, in.hidden, in.classes};
  HeadOutputs want;
  want.logits.resize(static_cast<std::size_t>(in.batch * in.classes));
  want.dlogits.resize(want.logits.size());
  want.dw.resize(static_cast<std::size_t>(in.classes * in.hidden));
  want.db.resize(static_cast<std::size_t>(in.classes));
  want.dh.resize(static_cast<std::size_t>(in.batch * in.hidden));
  want.dh_sums.assign(static_cast<std::size_t>(in.hidden), 0.0f);
  ref::linear_forward(in.h.data(), in.w.data(), in.b.data(), want.logits.data(), fc2, Activation::identity);
  want.loss = {ref::softmax_xent(want.logits.data(), in.labels.data(), want.dlogits.data(), in.batch,
                                 in.classes, in.grad_scale)};
  ref::linear_backward(want.dlogits.data(), in.h.data(), in.w.data(), want.dw.data(), want.db.data(),
                       want.dh.data(), fc2, in.act, in.z.empty() ? nullptr : in.z.data());
  for (int r = 0; r < in.batch; ++r) {
    for (int k = 0; k < in.hidden; ++k)
      want.dh_sums[static_cast<std::size_t>(k)] += want.dh[static_cast<std::size_t>(r * in.hidden + k)];
  }
  return want;
}

}  // namespace

TEST_CASE("the classifier head equals the plain launches to the bit and the reference within 1e-5",
          "[gpu][classifier_head]") {
  const int batch = GENERATE(from_range(sweep({0, 1, 7, 33, 64, 65, 100, 601}, {0, 7, 65, 100, 601})));
  const int hidden = GENERATE(from_range(sweep({1, 37, 256, 300}, {1, 37, 300})));
  const int classes = GENERATE(1, 10, 33);
  // The table's activations in turn across the shapes, each on every size of each dimension.
  const Activation act =
      kActivations[static_cast<std::size_t>(in_turn(static_cast<int>(kActivations.size()),
                                                    {{{0, 1, 7, 33, 64, 65, 100, 601}, batch},
                                                     {{1, 37, 256, 300}, hidden},
                                                     {{1, 10, 33}, classes}}))]
          .id;
  CAPTURE(batch, hidden, classes, activation_name(act));
  if (!cuda::classifier_head_fits(batch, classes)) {
    CHECK(classes == 33);  // 10 classes fit up to 601 rows; 33 up to 182
    return;
  }
  Rng rng(static_cast<std::uint64_t>(batch) * 7919u + static_cast<std::uint64_t>(hidden) * 31u +
          static_cast<std::uint64_t>(classes));
  const HeadInputs in(batch, hidden, classes, act, rng);
  const auto d_h = to_device(in.h);
  const auto d_z = to_device(in.z);
  const auto d_w = to_device(in.w);
  const auto d_b = to_device(in.b);
  const auto d_labels = to_device(in.labels);
  Stream stream;

  DeviceOutputs fused(in);
  cuda::ClassifierHeadArgs args;
  args.h = d_h.data();
  args.z = d_z.data();
  args.activation = act;
  args.w = d_w.data();
  args.b = d_b.data();
  args.labels = d_labels.data();
  args.logits = fused.logits.data();
  args.dlogits = fused.dlogits.data();
  args.loss_sum = fused.loss.data();
  args.dw = fused.dw.data();
  args.db = fused.db.data();
  args.dh = fused.dh.data();
  args.dh_sums = fused.dh_sums.data();
  args.batch = batch;
  args.hidden = hidden;
  args.classes = classes;
  args.grad_scale = in.grad_scale;
  cuda::classifier_head(args, stream.get());
  const HeadOutputs got = fused.to_host_all();

  // The plain path's launches, as CudaReplica makes them, with each GEMM whose order the head follows.
  for (GemmImpl impl : gemms_with_common_bits()) {
    CAPTURE(gemm_impl_name(impl));
    const cuda::GemmContext ctx{impl, stream.get(), nullptr};
    const LinearShape fc2{batch, hidden, classes};
    DeviceOutputs plain(in);
    cuda::linear_forward(d_h.data(), d_w.data(), d_b.data(), plain.logits.data(), fc2, Activation::identity,
                         ctx);
    cuda::softmax_xent(plain.logits.data(), d_labels.data(), plain.dlogits.data(), plain.loss.data(), batch,
                       classes, in.grad_scale, stream.get());
    cuda::linear_backward(plain.dlogits.data(), d_h.data(), d_w.data(), plain.dw.data(), plain.db.data(),
                          plain.dh.data(), fc2, act, ctx, d_z.data());
    cuda::column_sums(plain.dh.data(), plain.dh_sums.data(), batch, hidden, stream.get());
    const HeadOutputs want = plain.to_host_all();
    CHECK(bitwise_equal(got.logits, want.logits));
    CHECK(bitwise_equal(got.dlogits, want.dlogits));
    CHECK(bitwise_equal(got.loss, want.loss));
    CHECK(bitwise_equal(got.dw, want.dw));
    CHECK(bitwise_equal(got.db, want.db));
    CHECK(bitwise_equal(got.dh, want.dh));
    CHECK(bitwise_equal(got.dh_sums, want.dh_sums));
  }

  const HeadOutputs want = reference(in);
  CHECK(max_rel_error(got.logits, want.logits) <= kTolerance);
  CHECK(max_rel_error(got.dlogits, want.dlogits) <= kTolerance);
  CHECK(max_rel_error(got.loss, want.loss) <= kTolerance);
  CHECK(max_rel_error(got.dw, want.dw) <= kTolerance);
  CHECK(max_rel_error(got.db, want.db) <= kTolerance);
  CHECK(max_rel_error(got.dh, want.dh) <= kTolerance);
  CHECK(max_rel_error(got.dh_sums, want.dh_sums) <= kTolerance);
}

TEST_CASE("the classifier head refuses shapes it cannot take", "[gpu][classifier_head]") {
  CHECK(cuda::classifier_head_fits(601, 10));
  CHECK(cuda::classifier_head_max_rows(10) == 601);
  CHECK(cuda::classifier_head_fits(cuda::classifier_head_max_rows(7), 7));
  CHECK_FALSE(cuda::classifier_head_fits(cuda::classifier_head_max_rows(7) + 1, 7));
  CHECK_THROWS_AS(cuda::classifier_head_max_rows(0), std::invalid_argument);
  CHECK_FALSE(cuda::classifier_head_fits(602, 10));
  CHECK_FALSE(cuda::classifier_head_fits(-1, 10));
  CHECK_FALSE(cuda::classifier_head_fits(64, 0));
  cuda::ClassifierHeadArgs args;
  args.batch = 64;
  args.hidden = 256;
  args.classes = 10;
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(cuda::classifier_head(args, nullptr), Contains("null pointer"));
  // Every pointer set (refused before any launch, so one small buffer serves): only the size is wrong.
  DeviceBuffer<float> floats(1);
  DeviceBuffer<std::uint8_t> bytes(1);
  args.h = args.w = args.b = floats.data();
  args.labels = bytes.data();
  args.logits = args.dlogits = args.loss_sum = args.dw = args.db = args.dh = args.dh_sums = floats.data();
  args.batch = 602;
  CHECK_THROWS_WITH(cuda::classifier_head(args, nullptr), Contains("do not fit"));
  args.batch = 64;
  args.classes = 0;
  CHECK_THROWS_WITH(cuda::classifier_head(args, nullptr), Contains("bad shape"));
}
