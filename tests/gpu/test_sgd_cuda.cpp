// The fused SGD step against ref::sgd_step, with every torch.optim.SGD option. Both spell out the same
// roundings in the same order (the kernel with __fmul_rn/__fadd_rn, so that nvcc does not fuse them into
// FMAs), so the results must agree to the bit, not merely within a tolerance.
#include <catch2/catch.hpp>

#include <cmath>

#include "kernels/cuda/ops/sgd.hpp"
#include "kernels/ref/sgd.hpp"
#include "tests/gpu/gpu_test_util.hpp"

using namespace mnistdp;
using namespace mnistdp::gpu_test;

namespace {

struct NamedConfig {
  const char* name;
  SgdConfig cfg;
};

// sgd_step against ref::sgd_step on n parameters: every option, aligned buffers and not, three steps.
void check_sgd_step(std::size_t n);

}  // namespace

TEST_CASE("sgd_step matches the reference to the bit with every option", "[gpu][sgd]") {
  // 203,530: the model's parameter count.
  check_sgd_step(GENERATE(from_range(sweep<std::size_t>({1, 7, 1000, 203530}, {1, 7, 1000, 4099}))));
}

// Past the grid's cap of 4,096 blocks of 256 threads, aligned (4,198,403 / 4 quads for 1,048,576 threads)
// or not (4,198,403 elements): threads go round their grid-stride loop more than once. Not under a
// sanitizer, which would take minutes over its million emulated threads (tests/CMakeLists.txt).
TEST_CASE("sgd_step goes round its grid-stride loop past 4096 blocks, to the bit", "[gpu][sgd]") {
  check_sgd_step(4198403);
}

namespace {

void check_sgd_step(std::size_t n) {
  const NamedConfig named =
      GENERATE(NamedConfig{"plain", sgd_config(0.01f, 0.0f, 0.0f, 0.0f, false)},
               NamedConfig{"momentum", sgd_config(0.05f, 0.9f, 0.0f, 0.0f, false)},
               NamedConfig{"dampening", sgd_config(0.05f, 0.9f, 0.1f, 0.0f, false)},
               NamedConfig{"nesterov", sgd_config(0.05f, 0.9f, 0.0f, 0.0f, true)},
               NamedConfig{"weight decay", sgd_config(0.01f, 0.0f, 0.0f, 1e-2f, false)},
               NamedConfig{"everything", sgd_config(0.03f, 0.8f, 0.0f, 5e-4f, true)},
               NamedConfig{"dampened decay", sgd_config(0.03f, 0.8f, 0.25f, 5e-4f, false)});
  // The kernel moves aligned buffers four elements at a time and the rest one by one: offset by one float,
  // no buffer is 16-byte aligned.
  const std::size_t offset = GENERATE(0, 1);
  CAPTURE(n, named.name, offset);
  const SgdConfig& cfg = named.cfg;
  const bool with_momentum = cfg.momentum != 0.0f;
  Rng rng(n * 31 + 5);

  std::vector<float> params = random_floats(n, rng);
  std::vector<float> momentum(n, 0.0f);
  // Each buffer holds offset + n elements and the kernel is given them from element `offset` on.
  DeviceBuffer<float> d_params(offset + n);
  DeviceBuffer<float> d_grads(offset + n);
  DeviceBuffer<float> d_momentum(offset + n);
  poison(d_params);
  poison(d_momentum);  // the first step must initialise it, not read it
  const auto download = [&](const DeviceBuffer<float>& dev) { return to_host(dev.data() + offset, n); };
  copy_to_device(d_params.data() + offset, params);
  Stream stream;

  // Three steps with fresh gradients: the first initialises the momentum buffer, the others update it.
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    const auto grads = random_floats(n, rng);
    copy_to_device(d_grads.data() + offset, grads);
    ref::sgd_step(params.data(), grads.data(), with_momentum ? momentum.data() : nullptr, n, cfg, step == 0);
    cuda::sgd_step(d_params.data() + offset, d_grads.data() + offset,
                   with_momentum ? d_momentum.data() + offset : nullptr, n, cfg, step == 0, stream.get());
    const auto got = download(d_params);
    CHECK(max_rel_error(got, params) <= 1e-6);
    CHECK(bitwise_equal(got, params));
    if (with_momentum) CHECK(bitwise_equal(download(d_momentum), momentum));
  }
  // The element before the buffers is not theirs: still the poison.
  if (offset == 1) CHECK(std::isnan(to_host(d_params.data(), 1).front()));
}

}  // namespace
