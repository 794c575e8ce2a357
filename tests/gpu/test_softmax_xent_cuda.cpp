// Softmax cross-entropy (loss sum and dlogits) and the correct count on the device, against the reference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/ops/softmax_xent.hpp"
#include "kernels/cuda/thrust/accuracy.hpp"
#include "kernels/cuda/thrust/scratch.hpp"
#include "kernels/ref/softmax_xent.hpp"
#include "tests/gpu/gpu_test_util.hpp"

using namespace mnistdp;
using namespace mnistdp::gpu_test;

namespace {
constexpr double kTolerance = 1e-5;
}

TEST_CASE("softmax_xent matches the reference: loss sum and dlogits", "[gpu][softmax_xent]") {
  const int batch = GENERATE(0, 1, 7, 21, 22, 64, 65, 1024);
  const int classes = GENERATE(1, 10, 33);
  CAPTURE(batch, classes);
  const auto n = static_cast<std::size_t>(batch) * static_cast<std::size_t>(classes);
  Rng rng(static_cast<std::uint64_t>(batch * 100 + classes));
  // Wide logits, so that the max shift matters and some rows are nearly one-hot.
  const auto logits = random_floats(n, rng, -12.0f, 12.0f);
  const auto labels = random_bytes(static_cast<std::size_t>(batch), rng, static_cast<std::uint32_t>(classes));
  const float grad_scale = 1.0f / static_cast<float>(batch + 3);  // a shard of a larger global batch

  std::vector<float> want_d(n);
  const float want_loss =
      ref::softmax_xent(logits.data(), labels.data(), want_d.data(), batch, classes, grad_scale);

  const auto d_logits = to_device(logits);
  const auto d_labels = to_device(labels);
  DeviceBuffer<float> d_d(n), d_loss(1);
  Stream stream;
  poison(d_d);
  poison(d_loss);
  cuda::softmax_xent(d_logits.data(), d_labels.data(), d_d.data(), d_loss.data(), batch, classes, grad_scale,
                     stream.get());
  const float loss = to_host(d_loss)[0];
  CHECK(rel_error(loss, want_loss) <= kTolerance);
  CHECK(max_rel_error(to_host(d_d), want_d) <= kTolerance);

  // Without dlogits (evaluation): the same loss, to the bit, since the reduction order is fixed.
  poison(d_loss);
  cuda::softmax_xent(d_logits.data(), d_labels.data(), nullptr, d_loss.data(), batch, classes, 1.0f,
                     stream.get());
  const float loss_again = to_host(d_loss)[0];
  CHECK(std::memcmp(&loss, &loss_again, sizeof(float)) == 0);
}

TEST_CASE("mark_correct and count_marked match the reference count, ties included", "[gpu][accuracy]") {
  const int batch = GENERATE(0, 1, 7, 65, 1024, 3000);
  const int classes = GENERATE(1, 10, 33);
  CAPTURE(batch, classes);
  const auto n = static_cast<std::size_t>(batch) * static_cast<std::size_t>(classes);
  Rng rng(static_cast<std::uint64_t>(batch * 100 + classes + 1));
  // Few distinct values, so that many rows have tied maxima: the first one must win, as in torch.argmax.
  std::vector<float> logits(n);
  for (float& z : logits)
    z = static_cast<float>(rng.below(4));
  const auto labels = random_bytes(static_cast<std::size_t>(batch), rng, static_cast<std::uint32_t>(classes));
  const int want = ref::count_correct(logits.data(), labels.data(), batch, classes);

  const auto d_logits = to_device(logits);
  const auto d_labels = to_device(labels);
  DeviceBuffer<std::uint8_t> d_correct(static_cast<std::size_t>(batch));
  poison(d_correct);
  Stream stream;
  ThrustScratch scratch;
  cuda::mark_correct(d_logits.data(), d_labels.data(), d_correct.data(), batch, classes, scratch,
                     stream.get());
  CHECK(cuda::count_marked(d_correct.data(), batch, scratch, stream.get()) == want);
  // Each row's mark, against the reference's verdict on that row alone.
  const auto marks = to_host(d_correct);
  for (int r = 0; r < batch; ++r) {
    const auto row = static_cast<std::size_t>(r);
    const int one = ref::count_correct(logits.data() + row * static_cast<std::size_t>(classes),
                                       labels.data() + row, 1, classes);
    REQUIRE(marks[row] == one);
  }
}

TEST_CASE("sum_in_double adds floats in double", "[gpu][accuracy]") {
  const int count = GENERATE(0, 1, 10, 1000, 5000);
  CAPTURE(count);
  Rng rng(static_cast<std::uint64_t>(count) + 5);
  const auto values = random_floats(static_cast<std::size_t>(count), rng, 0.0f, 3000.0f);
  double want = 0.0;
  for (float v : values)
    want += static_cast<double>(v);
  const DeviceBuffer<float> d_values = count > 0 ? to_device(values) : DeviceBuffer<float>();
  Stream stream;
  ThrustScratch scratch;
  // Floats widened exactly and added in double: any order is within a few double roundings of the host's.
  CHECK(std::fabs(cuda::sum_in_double(d_values.data(), count, scratch, stream.get()) - want) <=
        1e-12 * std::max(want, 1.0));
}
