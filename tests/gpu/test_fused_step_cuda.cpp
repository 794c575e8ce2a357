// The fused step's own kernels against the plain path's launches, to the bit: the batch gathered inside the
// first layer's forward product (kernels/cuda/fused/gather_linear.hpp) against gather_normalize_at and
// linear_forward, and the weight gradient with every parameter's SGD step
// (kernels/cuda/fused/weight_gradient_sgd.hpp) against the weight GEMM and sgd_step. Shapes that fit no tile,
// every output poisoned before the launch. And the three kernels in a row launched programmatically against
// the serial launches.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <tuple>

#include "host/cuda/fused_kernel_arguments.hpp"
#include "host/model/params.hpp"
#include "kernels/cuda/fused/gather_linear.hpp"
#include "kernels/cuda/fused/persistent_step.hpp"
#include "kernels/cuda/fused/weight_gradient_sgd.hpp"
#include "kernels/cuda/gemm/gemm.hpp"
#include "kernels/cuda/ops/gather.hpp"
#include "kernels/cuda/ops/linear.hpp"
#include "kernels/cuda/ops/sgd.hpp"
#include "kernels/cuda/runtime/graph.hpp"
#include "tests/gpu/gpu_test_util.hpp"

using namespace mnistdp;
using namespace mnistdp::gpu_test;

namespace {

const std::vector<GemmImpl> kHandWritten = gemms_with_common_bits();

}  // namespace

TEST_CASE("the gathered forward product equals the gather and the forward product to the bit",
          "[gpu][fused_step]") {
  const int batch = GENERATE(1, 7, 64, 65);
  const int in = GENERATE(1, 33, 300, 784);  // 300 and 784: more than one slab of k
  const int out = GENERATE(1, 10, 256);
  // The activations of the table in turn across the shapes, each on every size of each dimension.
  const Activation act =
      kActivations[static_cast<std::size_t>(
                       in_turn(static_cast<int>(kActivations.size()),
                               {{{1, 7, 64, 65}, batch}, {{1, 33, 300, 784}, in}, {{1, 10, 256}, out}}))]
          .id;
  const bool keeps_z = keeps_pre_activation(act);
  CAPTURE(batch, in, out, activation_name(act));
  constexpr int kImages = 500;
  Rng rng(static_cast<std::uint64_t>(batch) * 100003u + static_cast<std::uint64_t>(in) * 101u +
          static_cast<std::uint64_t>(out));
  auto images = random_bytes(static_cast<std::size_t>(kImages) * static_cast<std::size_t>(in), rng);
  images[0] = 0;
  images[images.size() - 1] = 255;
  const auto labels = random_bytes(kImages, rng, 10);
  std::vector<std::int32_t> order(kImages);
  for (auto& i : order)
    i = static_cast<std::int32_t>(rng.below(kImages));
  const int first = 123;  // the batch starts inside the order, as a replayed step's does
  const auto w =
      random_floats(static_cast<std::size_t>(out) * static_cast<std::size_t>(in), rng, -0.1f, 0.1f);
  const auto b = random_floats(static_cast<std::size_t>(out), rng, -0.1f, 0.1f);

  const auto d_images = to_device(images);
  const auto d_labels = to_device(labels);
  const auto d_order = to_device(order);
  const auto d_first = to_device(std::vector<int>{first});
  const auto d_w = to_device(w);
  const auto d_b = to_device(b);
  const auto nx = static_cast<std::size_t>(batch) * static_cast<std::size_t>(in);
  const auto nh = static_cast<std::size_t>(batch) * static_cast<std::size_t>(out);
  DeviceBuffer<float> x(nx), h(nh), z(nh), plain_x(nx), plain_h(nh), plain_z(nh);
  DeviceBuffer<std::uint8_t> y(static_cast<std::size_t>(batch)), plain_y(static_cast<std::size_t>(batch));
  for (auto* buffer : {&x, &h, &z, &plain_x, &plain_h, &plain_z})
    poison(*buffer);
  poison(y);
  poison(plain_y);
  Stream stream;

  cuda::GatherLinearArgs args;
  args.images = d_images.data();
  args.labels = d_labels.data();
  args.order = d_order.data();
  args.first = d_first.data();
  args.w = d_w.data();
  args.b = d_b.data();
  args.x = x.data();
  args.y = y.data();
  args.h = h.data();
  args.z = keeps_z ? z.data() : nullptr;
  args.activation = act;
  args.batch = batch;
  args.in = in;
  args.out = out;
  cuda::gather_linear_forward(args, stream.get());
  const auto got_x = to_host(x);
  const auto got_y = to_host(y);
  const auto got_h = to_host(h);
  const auto got_z = to_host(z);

  cuda::gather_normalize_at(d_images.data(), d_labels.data(), d_order.data(), d_first.data(), plain_x.data(),
                            plain_y.data(), batch, in, stream.get());
  CHECK(bitwise_equal(got_x, to_host(plain_x)));
  CHECK(bitwise_equal(got_y, to_host(plain_y)));
  for (GemmImpl impl : kHandWritten) {
    CAPTURE(gemm_impl_name(impl));
    poison(plain_h);
    poison(plain_z);
    cuda::linear_forward(plain_x.data(), d_w.data(), d_b.data(), plain_h.data(), {batch, in, out}, act,
                         {impl, stream.get(), nullptr}, keeps_z ? plain_z.data() : nullptr);
    CHECK(bitwise_equal(got_h, to_host(plain_h)));
    // z as the plain path keeps it, or untouched (still poisoned in both) where the activation needs none.
    CHECK(bitwise_equal(got_z, to_host(plain_z)));
  }
}

namespace {

// The last kernel against the plain launches, on one shape with one SGD setting. misaligned_dy: dy one float
// into its allocation, so that its rows are not 16-byte aligned and the kernel loads it as scalars.
// others: the parameters after the layer's weights.
void check_weight_gradient_sgd(int batch, int in, int out, const SgdConfig& cfg, bool first_step,
                               bool misaligned_dy = false, std::size_t others = 0) {
  const auto weights = static_cast<std::size_t>(out) * static_cast<std::size_t>(in);
  if (others == 0) others = static_cast<std::size_t>(out) + 37;
  CAPTURE(batch, in, out, others, cfg.lr, cfg.momentum, cfg.dampening, cfg.weight_decay, cfg.nesterov,
          first_step, misaligned_dy);
  const std::size_t n = weights + others;  // the layer's weights, then others
  Rng rng(static_cast<std::uint64_t>(batch) * 7919u + static_cast<std::uint64_t>(in) * 31u +
          static_cast<std::uint64_t>(out) + (first_step ? 1u : 0u));
  auto dy = random_floats(static_cast<std::size_t>(batch) * static_cast<std::size_t>(out), rng);
  if (misaligned_dy) dy.insert(dy.begin(), 0.0f);
  const std::size_t dy_offset = misaligned_dy ? 1 : 0;
  const auto xs = random_floats(static_cast<std::size_t>(batch) * static_cast<std::size_t>(in), rng);
  const auto params = random_floats(n, rng);
  auto grads = random_floats(n, rng);  // the other parameters' gradients, as the earlier kernels left them
  for (std::size_t i = 0; i < weights; ++i)
    grads[i] = std::numeric_limits<float>::quiet_NaN();  // the kernel computes these: poisoned
  const auto momentum = random_floats(n, rng);
  const bool with_momentum = cfg.momentum != 0.0f;

  const auto d_dy = to_device(dy);
  const auto d_x = to_device(xs);
  auto d_params = to_device(params);
  auto d_grads = to_device(grads);
  auto d_momentum = to_device(momentum);
  auto d_cursor = to_device(std::vector<int>{5});
  Stream stream;

  cuda::WeightGradientSgdArgs args;
  args.dy = d_dy.data() + dy_offset;
  args.x = d_x.data();
  args.params = d_params.data();
  args.grads = d_grads.data();
  args.momentum = with_momentum ? d_momentum.data() : nullptr;
  args.batch = batch;
  args.in = in;
  args.out = out;
  args.n = n;
  args.sgd = cfg;
  args.first_step = first_step;
  args.cursor = d_cursor.data();
  args.cursor_delta = 64;
  cuda::weight_gradient_sgd(args, stream.get());
  const auto got_params = to_host(d_params);
  const auto got_grads = to_host(d_grads);
  const auto got_momentum = to_host(d_momentum);
  CHECK(to_host(d_cursor)[0] == 69);

  for (GemmImpl impl : kHandWritten) {
    CAPTURE(gemm_impl_name(impl));
    auto want_params = to_device(params);
    auto want_grads = to_device(grads);
    auto want_momentum = to_device(momentum);
    // The plain path: the weight GEMM of linear_backward (dw = dy^T x), then sgd_step over everything.
    cuda::GemmProblem p;
    p.m = out;
    p.n = in;
    p.k = batch;
    p.a = d_dy.data() + dy_offset;
    p.lda = out;
    p.trans_a = true;
    p.b = d_x.data();
    p.ldb = in;
    p.c = want_grads.data();
    p.ldc = in;
    cuda::gemm(p, impl, stream.get(), nullptr);
    cuda::sgd_step(want_params.data(), want_grads.data(), with_momentum ? want_momentum.data() : nullptr, n,
                   cfg, first_step, stream.get());
    CHECK(bitwise_equal(got_grads, to_host(want_grads)));
    CHECK(bitwise_equal(got_params, to_host(want_params)));
    CHECK(bitwise_equal(got_momentum, to_host(want_momentum)));
  }
}

}  // namespace

TEST_CASE("the weight gradient with SGD equals the weight GEMM and sgd_step to the bit, any shape",
          "[gpu][fused_step]") {
  const int batch = GENERATE(from_range(sweep({0, 1, 7, 64, 65}, {0, 7, 65})));
  const int in = GENERATE(from_range(sweep({1, 33, 784}, {1, 33})));
  // The kernel's items take 8 rows of dw: 1 and 10 with scalar loads of dy (rows not in groups of 4), 12 and
  // 20 with vector loads and a last item of 4 rows, 256 with vector loads and whole items.
  const int out = GENERATE(from_range(sweep({1, 10, 12, 20, 256}, {10, 12, 20})));
  check_weight_gradient_sgd(batch, in, out, sgd_config(0.03f, 0.8f, 0.25f, 5e-4f, false), false);
  // Rows in groups of 4 but not 16-byte aligned: scalar loads.
  if (out % 4 == 0)
    check_weight_gradient_sgd(batch, in, out, sgd_config(0.03f, 0.8f, 0.25f, 5e-4f, false), false, true);
}

// Past the grid's cap of 8,192 blocks of 128 threads (99 weight items and 1,049,576 others): threads go round
// their grid-stride loop more than once. Not under a sanitizer, which would take minutes over its million
// emulated threads (tests/CMakeLists.txt).
TEST_CASE("the weight gradient with SGD goes round its grid-stride loop past 8192 blocks, to the bit",
          "[gpu][fused_step]") {
  check_weight_gradient_sgd(7, 33, 20, sgd_config(0.03f, 0.8f, 0.25f, 5e-4f, false), false, false,
                            std::size_t{8192} * 128 + 1000);
}

TEST_CASE("the weight gradient with SGD equals sgd_step to the bit with every option", "[gpu][fused_step]") {
  const SgdConfig cfg =
      GENERATE(sgd_config(0.01f, 0.0f, 0.0f, 0.0f, false), sgd_config(0.05f, 0.9f, 0.0f, 0.0f, false),
               sgd_config(0.03f, 0.8f, 0.25f, 5e-4f, false), sgd_config(0.03f, 0.8f, 0.0f, 5e-4f, true));
  const bool first_step_wanted = GENERATE(false, true);  // taken only with momentum, as torch does
  // fc1's shape, or under a sanitizer one with a partial item and a partial block of the batch.
  const auto [batch, in, out] = kUnderSanitizer ? std::tuple{65, 100, 20} : std::tuple{64, 784, 256};
  check_weight_gradient_sgd(batch, in, out, cfg, cfg.momentum != 0.0f && first_step_wanted);
}

TEST_CASE("the fused step's kernels refuse what they cannot take", "[gpu][fused_step]") {
  using Catch::Matchers::Contains;
  cuda::WeightGradientSgdArgs wg;
  wg.batch = 4;
  wg.in = 10;
  wg.out = 3;
  wg.n = 29;  // fewer than the 30 weights
  DeviceBuffer<float> floats(64);
  wg.dy = wg.x = floats.data();
  wg.params = wg.grads = floats.data();
  CHECK_THROWS_WITH(cuda::weight_gradient_sgd(wg, nullptr), Contains("shorter than the weights"));
  wg.n = 40;
  wg.sgd.momentum = 0.9f;
  CHECK_THROWS_WITH(cuda::weight_gradient_sgd(wg, nullptr), Contains("needs a buffer"));
  cuda::GatherLinearArgs gl;
  gl.batch = 4;
  gl.in = 10;
  gl.out = 3;
  CHECK_THROWS_WITH(cuda::gather_linear_forward(gl, nullptr), Contains("null pointer"));
}

namespace {

// SimpleNet's buffers for the fused step, on the device, all from one seed: 300 images (four batches of 64
// and one of 44, say), parameters, momentum, and every output poisoned; activations for `rows` rows, z among
// them where the hidden layer's activation keeps it.
struct FusedStepState {
  static constexpr int kImages = 300;
  using L = ParamLayout;
  DeviceBuffer<std::uint8_t> images, labels, y;
  DeviceBuffer<std::int32_t> order;
  DeviceBuffer<int> cursor;
  DeviceBuffer<float> params, grads, momentum, x, h, z, dh, logits, dlogits;
  std::size_t dh_offset = 0;  // 1: dh's rows not 16-byte aligned, so that the last kernel loads it as scalars
  Activation activation = kDefaultActivation;

  explicit FusedStepState(std::uint64_t seed, int batch_rows = 64, bool misaligned_dh = false,
                          Activation act = kDefaultActivation)
      : dh_offset(misaligned_dh ? 1 : 0), activation(act) {
    const auto n = static_cast<std::size_t>(batch_rows);
    Rng rng(seed);
    images = to_device(random_bytes(std::size_t{kImages} * L::kInput, rng));
    labels = to_device(random_bytes(kImages, rng, L::kClasses));
    std::vector<std::int32_t> rows(kImages);
    std::iota(rows.begin(), rows.end(), 0);
    rng.shuffle(std::span<std::int32_t>(rows));
    order = to_device(rows);
    cursor = to_device(std::vector<int>{0});
    params = to_device(random_floats(L::kCount, rng, -0.05f, 0.05f));
    momentum = to_device(random_floats(L::kCount, rng, -0.01f, 0.01f));
    grads = DeviceBuffer<float>(L::kGradCount);
    x = DeviceBuffer<float>(n * L::kInput);
    y = DeviceBuffer<std::uint8_t>(n);
    h = DeviceBuffer<float>(n * L::kHidden);
    if (keeps_pre_activation(act)) z = DeviceBuffer<float>(n * L::kHidden);
    dh = DeviceBuffer<float>(n * L::kHidden + dh_offset);
    logits = DeviceBuffer<float>(n * L::kClasses);
    dlogits = DeviceBuffer<float>(n * L::kClasses);
    poison(grads);
    poison(x);
    poison(y);
    poison(h);
    poison(z);
    poison(dh);
    poison(logits);
    poison(dlogits);
  }

  StepView view() {
    StepView v;
    v.images = images.data();
    v.labels = labels.data();
    v.order = order.data();
    v.cursor = cursor.data();
    v.params = params.data();
    v.grads = grads.data();
    v.momentum = momentum.data();
    v.x = x.data();
    v.y = y.data();
    v.h = h.data();
    v.z = z.data();
    v.activation = activation;
    v.dh = dh.data() + dh_offset;
    v.logits = logits.data();
    v.dlogits = dlogits.data();
    return v;
  }
};

// Device 0's SMs: the persistent kernel's grids are counted in them.
int sm_count() {
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return sms;
}

// Every buffer of `got` but the row offset equal to `want`'s, to the bit.
void check_same_buffers(const FusedStepState& got, const FusedStepState& want) {
  CHECK(bitwise_equal(to_host(got.params), to_host(want.params)));
  CHECK(bitwise_equal(to_host(got.momentum), to_host(want.momentum)));
  CHECK(bitwise_equal(to_host(got.grads), to_host(want.grads)));
  CHECK(bitwise_equal(to_host(got.x), to_host(want.x)));
  CHECK(bitwise_equal(to_host(got.y), to_host(want.y)));
  CHECK(bitwise_equal(to_host(got.h), to_host(want.h)));
  CHECK(bitwise_equal(to_host(got.z), to_host(want.z)));
  CHECK(bitwise_equal(to_host(got.dh), to_host(want.dh)));
  CHECK(bitwise_equal(to_host(got.logits), to_host(want.logits)));
  CHECK(bitwise_equal(to_host(got.dlogits), to_host(want.dlogits)));
}

}  // namespace

TEST_CASE("the fused step launched programmatically gives the serial launch's bits", "[gpu][fused_step]") {
  // Five steps in a row on one stream with no wait between them, each reading its rows from the device's
  // row offset that the step before moved on, so that a kernel that touched memory before its predecessor
  // finished would change a result. captured:
  // the full batch's step captured once and replayed four times, as the replica runs it.
  const bool captured = GENERATE(false, true);
  CAPTURE(captured);
  const SgdConfig sgd = sgd_config(0.01f, 0.9f, 0.0f, 1e-4f, false);
  FusedStepState serial(71), programmatic(71);
  Stream stream;
  const cudaStream_t s = stream.get();
  auto run = [&](FusedStepState& state, cuda::LaunchOrder order) {
    const StepView view = state.view();
    auto full_batch = [&] { enqueue_fused_step(view, 64, 64, sgd, /*advance_cursor=*/true, order, s); };
    if (captured) {
      const CudaGraphExec graph(capture_graph(s, full_batch));
      for (int step = 0; step < 4; ++step)
        graph.launch(s);
    } else {
      for (int step = 0; step < 4; ++step)
        full_batch();
    }
    enqueue_fused_step(view, 44, 44, sgd, /*advance_cursor=*/true, order, s);
    stream.synchronize();
  };
  run(serial, cuda::LaunchOrder::serial);
  run(programmatic, cuda::LaunchOrder::programmatic);

  const std::vector<float> params = to_host(serial.params);
  REQUIRE(std::all_of(params.begin(), params.end(), [](float v) { return std::isfinite(v); }));
  CHECK(to_host(serial.cursor) == std::vector<int>{FusedStepState::kImages});
  check_same_buffers(programmatic, serial);
  CHECK(to_host(programmatic.cursor) == to_host(serial.cursor));
}

TEST_CASE("the persistent kernel gives the fused step's bits, every buffer", "[gpu][persistent]") {
  // Consecutive steps of `rows` rows and then a shorter one, as an epoch's steps and its last: the fused
  // step's kernels one by one (each reading its rows from the device's offset, which the step moves on)
  // against the persistent kernel, one launch for the full batches and one for the short one. Grids of one
  // block an SM and of the most that stay resident, and one of 5 blocks, fewer than the first phase's tiles
  // and the head's 12 blocks, so that each phase's loop runs several turns in a block (and 100 rows make 208
  // tiles, more than an H200's SMs); one row, a tile almost empty. Every SGD option, with a momentum buffer
  // that is not new. Under a sanitizer, fewer steps and options, and no grid of the most blocks that stay
  // resident (every emulated thread of a cooperative grid is alive at once, and ThreadSanitizer keeps state
  // for each).
  using Steps = std::tuple<int, int, int>;  // rows, full steps, short rows
  const auto [rows, full_steps, short_rows] =
      GENERATE(from_range(sweep<Steps>({{64, 4, 44}, {100, 2, 99}, {1, 5, 1}}, {{65, 1, 33}, {1, 1, 1}})));
  const int sms = sm_count();
  const int blocks =
      GENERATE_COPY(from_range(sweep({5, sms, sms * cuda::persistent_step_max_blocks_per_sm()}, {5, sms})));
  const SgdConfig sgd = GENERATE(from_range(sweep<SgdConfig>(
      {sgd_config(0.01f, 0.9f, 0.0f, 1e-4f, false), sgd_config(0.05f, 0.0f, 0.0f, 0.0f, false),
       sgd_config(0.02f, 0.8f, 0.1f, 0.0f, true)},
      {sgd_config(0.02f, 0.8f, 0.1f, 0.0f, true)})));
  // dh not 16-byte aligned: phase 3 (and the last kernel) with scalar loads.
  const bool misaligned_dh = GENERATE(false, true);
  // The table's activations in turn, each with both alignments and every shape.
  const Activation act =
      kActivations[static_cast<std::size_t>(
                       in_turn(static_cast<int>(kActivations.size()),
                               {{{0, 1}, static_cast<int>(misaligned_dh)}, {{64, 100, 1, 65}, rows}}))]
          .id;
  CAPTURE(rows, full_steps, short_rows, blocks, sgd.lr, sgd.momentum, sgd.nesterov, misaligned_dh,
          activation_name(act));
  REQUIRE(rows * full_steps + short_rows <= FusedStepState::kImages);
  FusedStepState fused(97, rows, misaligned_dh, act), persistent(97, rows, misaligned_dh, act);
  Stream stream;
  const cudaStream_t s = stream.get();

  const StepView f = fused.view();
  for (int step = 0; step < full_steps; ++step)
    enqueue_fused_step(f, rows, rows, sgd, /*advance_cursor=*/true, cuda::LaunchOrder::serial, s);
  enqueue_fused_step(f, short_rows, short_rows, sgd, /*advance_cursor=*/true, cuda::LaunchOrder::serial, s);

  const StepView p = persistent.view();
  enqueue_persistent_steps(p, rows, rows, sgd, /*first=*/0, full_steps, blocks, s);
  enqueue_persistent_steps(p, short_rows, short_rows, sgd, rows * full_steps, 1, blocks, s);
  stream.synchronize();

  const std::vector<float> params = to_host(fused.params);
  REQUIRE(std::all_of(params.begin(), params.end(), [](float v) { return std::isfinite(v); }));
  // The activations are the last step's (its rows; the rest of each buffer, the full batches').
  check_same_buffers(persistent, fused);
  // The persistent kernel takes the rows' position as an argument: the device's offset stays.
  CHECK(to_host(persistent.cursor) == std::vector<int>{0});
}

TEST_CASE("the persistent kernel's phase timer counts every phase and changes no result",
          "[gpu][persistent]") {
  const SgdConfig sgd = sgd_config(0.01f, 0.9f, 0.0f, 0.0f, false);
  FusedStepState plain(103), timed(103);
  DeviceBuffer<long long> cycles(3);
  const int sms = sm_count();
  Stream stream;
  // On the kernels' own stream: a cudaMemset would run on the legacy default stream, which this
  // non-blocking stream does not wait for.
  CUDA_CHECK(cudaMemsetAsync(cycles.data(), 0, cycles.bytes(), stream.get()));
  enqueue_persistent_steps(plain.view(), 64, 64, sgd, 0, 4, sms, stream.get());
  enqueue_persistent_steps(timed.view(), 64, 64, sgd, 0, 4, sms, stream.get(), cycles.data());
  stream.synchronize();
  check_same_buffers(timed, plain);
  for (const long long c : to_host(cycles))
    CHECK(c > 0);
}

TEST_CASE("the persistent kernel refuses what it cannot take", "[gpu][persistent]") {
  using Catch::Matchers::Contains;
  FusedStepState state(101);
  const StepView v = state.view();
  const SgdConfig sgd = sgd_config(0.01f, 0.0f, 0.0f, 0.0f, false);
  CHECK_THROWS_WITH(enqueue_persistent_steps(v, 64, 64, sgd, 0, 1, 0, nullptr),
                    Contains("fewer than one block"));
  CHECK_THROWS_WITH(
      enqueue_persistent_steps(v, 64, 64, sgd, std::numeric_limits<int>::max() - 10, 1, 1, nullptr),
      Contains("32-bit"));
  CHECK_THROWS_WITH(enqueue_persistent_steps(v, 64, 64, sgd, -1, 1, 1, nullptr), Contains("negative"));
  CHECK_THROWS_WITH(enqueue_persistent_steps(v, 4096, 4096, sgd, 0, 1, 1, nullptr), Contains("do not fit"));
  cuda::PersistentStepArgs mismatched;  // the head's rows are not the forward product's
  mismatched.forward.batch = 4;
  mismatched.head.batch = 3;
  mismatched.steps = 1;
  CHECK_THROWS_WITH(cuda::persistent_steps(mismatched, 1, nullptr), Contains("disagree"));
  // More blocks than stay resident: the cooperative launch is refused, not left to hang.
  const int most = cuda::persistent_step_max_blocks_per_sm();
  CHECK(most >= 1);
  const int sms = sm_count();
  CHECK_THROWS_AS(enqueue_persistent_steps(v, 64, 64, sgd, 0, 1, sms * most + 1, nullptr), CudaError);
}

TEST_CASE("the persistent kernel runs on every block that stays resident and refuses one more",
          "[gpu][persistent]") {
  // Its grid from the occupancy query, as the replica sizes it: on an H200, 132 SMs times the blocks its
  // registers, shared memory and threads leave room for (the emulated build has an entry with 132 SMs, where
  // those figures are ptxas's). One step against the fused step's kernels, and one block too many refused
  // rather than left to hang.
  const int blocks = sm_count() * cuda::persistent_step_max_blocks_per_sm();
  CAPTURE(sm_count(), blocks);
  REQUIRE(blocks >= 1);
  const SgdConfig sgd = sgd_config(0.01f, 0.9f, 0.0f, 0.0f, false);
  FusedStepState fused(107), persistent(107);
  Stream stream;
  const cudaStream_t s = stream.get();
  enqueue_fused_step(fused.view(), 64, 64, sgd, /*advance_cursor=*/true, cuda::LaunchOrder::serial, s);
  enqueue_persistent_steps(persistent.view(), 64, 64, sgd, /*first=*/0, 1, blocks, s);
  stream.synchronize();
  check_same_buffers(persistent, fused);
  CHECK_THROWS_AS(enqueue_persistent_steps(persistent.view(), 64, 64, sgd, 0, 1, blocks + 1, s), CudaError);
}
