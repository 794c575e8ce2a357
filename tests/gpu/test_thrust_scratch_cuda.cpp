// ThrustScratch's contract (kernels/cuda/thrust/scratch.hpp): the Thrust calls' temporaries come from it, the
// first call allocates and the later ones reuse its blocks, and the device memory it holds is what bytes()
// says, which CudaReplica::device_bytes() counts. On emulated devices the same calls take their temporaries
// from the same ThrustScratch (kernels/cuda/thrust/host_system.hpp), and the emulated Thrust's own checks
// follow: its temporaries come from the allocator it is given, a failing allocator stops it, and its sums
// are a tree, not the sequential sum.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <new>
#include <vector>

#include "host/model/init.hpp"
#include "kernels/cuda/thrust/accuracy.hpp"
#include "kernels/cuda/thrust/epoch_order.hpp"
#include "kernels/cuda/thrust/scratch.hpp"
#include "tests/gpu/gpu_test_util.hpp"

#if defined(MNISTDP_CUDA_EMULATED)
#include <cstdlib>

#include "kernels/cuda/thrust/host_system.hpp"
#endif

using namespace mnistdp;
using namespace mnistdp::gpu_test;

namespace {

std::size_t device_memory_used() {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return total_bytes - free_bytes;
}

}  // namespace

TEST_CASE("the epoch order's and evaluation's Thrust temporaries come from ThrustScratch, allocated once",
          "[gpu][thrust]") {
  const int count = 60000;
  const auto n = static_cast<std::size_t>(count);
  DeviceBuffer<std::int32_t> order(n);
  DeviceBuffer<std::uint64_t> keys(n);
  std::vector<std::uint8_t> host_marks(n);
  for (std::size_t i = 0; i < n; ++i)
    host_marks[i] = static_cast<std::uint8_t>(i % 3 == 0);
  const auto marks = to_device(host_marks);
  const auto values = to_device(std::vector<float>(n, 0.5f));
  ThrustScratch scratch;
  Stream stream;
  const std::size_t before = device_memory_used();

  cuda::epoch_order(order.data(), keys.data(), count, epoch_shuffle_seed(1, 0), scratch, stream.get());
  CHECK(cuda::count_marked(marks.data(), count, scratch, stream.get()) == (count + 2) / 3);
  CHECK(cuda::sum_in_double(values.data(), count, scratch, stream.get()) == 0.5 * count);
  // The sort's temporaries hold at least its keys once more (a radix sort's second buffer), on a GPU and on
  // emulated devices alike.
  REQUIRE(scratch.allocations() >= 1);
  CHECK(scratch.bytes() >= n * sizeof(std::uint64_t));
#if defined(MNISTDP_CUDA_EMULATED)
  // Emulated, every allocation is exact and nothing else allocates: the device's memory in use grew by what
  // the scratch says it holds. (A GPU's driver rounds to its own pages, and other processes share the count.)
  CHECK(device_memory_used() - before == scratch.bytes());
#else
  CHECK(device_memory_used() >= before);
#endif

  // Later calls, of every kind, reuse the blocks.
  const int allocations = scratch.allocations();
  const std::size_t bytes = scratch.bytes();
  DeviceBuffer<std::uint8_t> correct(n);
  const auto logits = to_device(std::vector<float>(n * 10, 1.0f));
  const auto labels = to_device(std::vector<std::uint8_t>(n, 0));
  for (int epoch = 1; epoch < 4; ++epoch) {
    cuda::epoch_order(order.data(), keys.data(), count, epoch_shuffle_seed(1, epoch), scratch, stream.get());
    cuda::mark_correct(logits.data(), labels.data(), correct.data(), count, 10, scratch, stream.get());
    CHECK(cuda::count_marked(correct.data(), count, scratch, stream.get()) == count);
    CHECK(cuda::sum_in_double(values.data(), count, scratch, stream.get()) == 0.5 * count);
  }
  CHECK(scratch.allocations() == allocations);
  CHECK(scratch.bytes() == bytes);
}

TEST_CASE("sum_in_double gives the same bits run to run", "[gpu][thrust]") {
  const int count = GENERATE(5, 1000, 60001);
  CAPTURE(count);
  Rng rng(static_cast<std::uint64_t>(count));
  const auto values = to_device(random_floats(static_cast<std::size_t>(count), rng, -1000.0f, 1000.0f));
  ThrustScratch scratch;
  Stream stream;
  const double first = cuda::sum_in_double(values.data(), count, scratch, stream.get());
  for (int run = 0; run < 3; ++run)
    CHECK(cuda::sum_in_double(values.data(), count, scratch, stream.get()) == first);
}

#if defined(MNISTDP_CUDA_EMULATED)
namespace {

// A source of temporaries on the host's heap that counts what it hands out, or, planted, refuses each one.
class CountingTemporaries final : public thrust_host::Temporaries {
 public:
  explicit CountingTemporaries(bool refuse) : refuse_(refuse) {}
  char* allocate(std::ptrdiff_t bytes) override {
    ++asked;
    if (refuse_) throw std::bad_alloc();
    ++live;
    return static_cast<char*>(std::malloc(bytes > 0 ? static_cast<std::size_t>(bytes) : 1));
  }
  void deallocate(char* block, std::size_t /*bytes*/) noexcept override {
    --live;
    std::free(block);
  }

  int asked = 0;
  int live = 0;

 private:
  bool refuse_;
};

}  // namespace

TEST_CASE(
    "the host system's Thrust takes its temporaries from the allocator it is given, and stops when it fails",
    "[gpu][thrust]") {
  const int count = 4097;
  const auto n = static_cast<std::size_t>(count);
  std::vector<std::int32_t> order(n);
  std::vector<std::uint64_t> keys(n);
  const std::vector<std::uint8_t> marks(n, 1);
  const std::vector<float> values(n, 2.0f);

  // The fixed twin: every algorithm that needs temporaries asks this allocator, and returns what it got.
  CountingTemporaries counting(false);
  thrust_host::epoch_order(counting, order.data(), keys.data(), count, epoch_shuffle_seed(7, 0));
  CHECK(counting.asked >= 1);
  std::vector<std::int32_t> host(n);
  epoch_order(host, 7, 0);
  CHECK(order == host);
  const int after_sort = counting.asked;
  CHECK(thrust_host::count_marked(counting, marks.data(), count) == count);
  CHECK(counting.asked > after_sort);
  const int after_count = counting.asked;
  CHECK(thrust_host::sum_in_double(counting, values.data(), count) == 2.0 * count);
  CHECK(counting.asked > after_count);
  CHECK(counting.live == 0);

  // The planted fault: an allocator that refuses. Each algorithm stops with its error, as a GPU's Thrust does
  // when ThrustScratch cannot allocate; a Thrust that took its temporaries elsewhere would not notice.
  CountingTemporaries refusing(true);
  CHECK_THROWS_AS(thrust_host::epoch_order(refusing, order.data(), keys.data(), count, 1), std::bad_alloc);
  CHECK_THROWS_AS(thrust_host::count_marked(refusing, marks.data(), count), std::bad_alloc);
  CHECK_THROWS_AS(thrust_host::sum_in_double(refusing, values.data(), count), std::bad_alloc);
  CHECK(refusing.asked == 3);
}

TEST_CASE("sum_in_double on the host system adds as a tree, not in sequence", "[gpu][thrust]") {
  // In doubles, 2^60 + 1 == 2^60. In sequence: 2^60, the next three ones lost, then 0 after -2^60, then the
  // last three ones kept: 3. As a tree of leaves of four: 2^60 and -2^60 (each leaf's ones lost), then 0.
  static_assert(thrust_host::kReduceLeaf == 4);
  const float big = std::ldexp(1.0f, 60);
  const std::vector<float> values = {big, 1.0f, 1.0f, 1.0f, -big, 1.0f, 1.0f, 1.0f};
  double sequential = 0.0;
  for (const float v : values)
    sequential += static_cast<double>(v);
  REQUIRE(sequential == 3.0);
  CountingTemporaries temporaries(false);
  const double tree = thrust_host::sum_in_double(temporaries, values.data(), static_cast<int>(values.size()));
  CHECK(tree == 0.0);
  CHECK(tree != sequential);
}
#endif
