#include "kernels/cuda/thrust/host_system.hpp"

#include <thrust/memory.h>
#include <thrust/system/cpp/execution_policy.h>

#include <algorithm>
#include <concepts>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <type_traits>
#include <utility>

#if defined(MNISTDP_THRUST_HOST_OPENMP)
#include <omp.h>
#include <thrust/system/omp/execution_policy.h>
#endif

#include "kernels/cuda/thrust/thrust_ops.cuh"

namespace mnistdp::thrust_host {
namespace {

// Thrust's allocator interface (value_type, allocate, deallocate) over Temporaries, the one a GPU's Thrust
// calls on ThrustScratch: every temporary the policies below ask for comes through it.
class Allocator {
 public:
  using value_type = char;

  explicit Allocator(Temporaries& from) : from_(&from) {}

  char* allocate(std::ptrdiff_t bytes) {
    check_one_thread();
    return from_->allocate(bytes);
  }
  void deallocate(char* block, std::size_t bytes) noexcept {
    check_one_thread();
    from_->deallocate(block, bytes);
  }

 private:
  // ThrustScratch is not thread-safe, and a GPU's Thrust asks it from the calling thread alone. The
  // algorithms here ask for their temporaries outside every parallel region (the reduction and the sort
  // below allocate before their loops); a Thrust whose algorithm asked from inside one would fail here,
  // loudly, rather than race.
  static void check_one_thread() noexcept {
#if defined(MNISTDP_THRUST_HOST_OPENMP)
    if (omp_in_parallel()) {
      std::fputs("thrust_host: Thrust asked for a temporary inside a parallel region\n", stderr);
      std::abort();
    }
#endif
  }

  Temporaries* from_;
};

// The parallel policy: OpenMP's system, with the allocator. Preset emu-tsan builds without OpenMP: libgomp is
// not built with ThreadSanitizer, which sees neither its barriers nor its pool's hand-offs and reports every
// parallel loop's writes, read after the loop, as races; there the same algorithms run on the sequential
// system. The reduction's shape, below, is the same in both, and so are its bits.
auto parallel(Allocator& allocator) {
#if defined(MNISTDP_THRUST_HOST_OPENMP)
  return thrust::omp::par(allocator);
#else
  return thrust::cpp::par(allocator);
#endif
}
using ParallelPolicy = decltype(parallel(std::declval<Allocator&>()));

// The threads the parallel loops below are cut for.
std::ptrdiff_t parallel_threads() {
#if defined(MNISTDP_THRUST_HOST_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// Thrust's reduction for ParallelPolicy (found by argument-dependent lookup, Thrust's way of letting a policy
// replace an algorithm), which thrust::reduce, transform_reduce and count reach. OpenMP's own sums one run a
// core in sequence and then the runs in sequence: one run, the sequential sum, on a machine of one core, and
// other bits on another machine. A GPU's CUB sums a few items a thread and then a tree across threads and
// blocks, in a shape that depends on the GPU; this one has a fixed tree shape (kReduceLeaf), so that a test
// that expects the sequential sum's bits fails here on every machine, and a run's bits are every run's. Its
// partial sums are a temporary from the allocator, as CUB's temporary storage is.
template <typename Policy, typename Iterator, typename T, typename Op>
requires std::same_as<Policy, ParallelPolicy> T reduce(Policy& policy, Iterator first, Iterator last, T init,
                                                       Op op) {
  static_assert(std::is_trivially_copyable_v<T>, "partial sums are kept in raw temporary memory");
  const std::ptrdiff_t n = std::distance(first, last);
  if (n == 0) return init;
  const std::ptrdiff_t leaves = (n + kReduceLeaf - 1) / kReduceLeaf;
  const auto buffer = thrust::get_temporary_buffer<T>(policy, leaves);
  T* sums = thrust::raw_pointer_cast(buffer.first);
#if defined(MNISTDP_THRUST_HOST_OPENMP)
#pragma omp parallel for
#endif
  for (std::ptrdiff_t leaf = 0; leaf < leaves; ++leaf) {
    const std::ptrdiff_t begin = leaf * kReduceLeaf;
    const std::ptrdiff_t end = begin + kReduceLeaf < n ? begin + kReduceLeaf : n;
    T sum = static_cast<T>(first[begin]);
    for (std::ptrdiff_t i = begin + 1; i < end; ++i)
      sum = op(sum, static_cast<T>(first[i]));
    sums[leaf] = sum;
  }
  for (std::ptrdiff_t width = 1; width < leaves; width *= 2) {
#if defined(MNISTDP_THRUST_HOST_OPENMP)
#pragma omp parallel for
#endif
    for (std::ptrdiff_t left = 0; left < leaves - width; left += 2 * width)
      sums[left] = op(sums[left], sums[left + width]);
  }
  const T total = op(init, sums[0]);
  thrust::return_temporary_buffer(policy, buffer.first, buffer.second);
  return total;
}

// Thrust's sort of unsigned integers for ParallelPolicy, in place of OpenMP's, which sorts each thread's
// tile with thrust::seq, whose temporaries come from the host's heap rather than from the policy's
// allocator. This one is a GPU's: a least-significant-digit radix sort, 8 bits a pass, each pass counted
// and scattered by every thread over its own tile, whose second buffer of keys and counts come from the
// allocator as one temporary, as CUB's radix sort takes its one temporary storage (even for a single key).
template <typename Policy, typename Key>
requires std::same_as<Policy, ParallelPolicy> && std::unsigned_integral<Key>
void sort(Policy& policy, Key* first, Key* last) {
  constexpr int kDigitBits = 8;
  constexpr std::ptrdiff_t kDigits = std::ptrdiff_t{1} << kDigitBits;
  constexpr int kPasses = static_cast<int>(sizeof(Key)) * 8 / kDigitBits;
  static_assert(kPasses % 2 == 0, "an even number of passes leaves the keys where they started");
  const std::ptrdiff_t n = last - first;
  if (n < 1) return;
  const std::ptrdiff_t threads = std::min(parallel_threads(), n);
  // [n] keys, then [kDigits, threads] counts, digit-major.
  constexpr std::ptrdiff_t kAlign = alignof(std::ptrdiff_t);
  const std::ptrdiff_t keys_bytes =
      (n * static_cast<std::ptrdiff_t>(sizeof(Key)) + kAlign - 1) / kAlign * kAlign;
  const auto storage = thrust::get_temporary_buffer<char>(
      policy, keys_bytes + threads * kDigits * static_cast<std::ptrdiff_t>(sizeof(std::ptrdiff_t)));
  char* bytes = thrust::raw_pointer_cast(storage.first);
  auto* count = reinterpret_cast<std::ptrdiff_t*>(bytes + keys_bytes);
  const auto tile = [n, threads](std::ptrdiff_t t) { return n * t / threads; };
  Key* from = first;
  Key* to = reinterpret_cast<Key*>(bytes);
  for (int pass = 0; pass < kPasses && n > 1; ++pass) {
    const int shift = pass * kDigitBits;
    const auto digit = [shift](Key k) { return static_cast<std::ptrdiff_t>((k >> shift) & (kDigits - 1)); };
#if defined(MNISTDP_THRUST_HOST_OPENMP)
#pragma omp parallel for num_threads(threads)
#endif
    for (std::ptrdiff_t t = 0; t < threads; ++t) {
      for (std::ptrdiff_t d = 0; d < kDigits; ++d)
        count[d * threads + t] = 0;
      for (std::ptrdiff_t i = tile(t); i < tile(t + 1); ++i)
        ++count[digit(from[i]) * threads + t];
    }
    // Where each thread's keys of each digit go: after every smaller digit's, and after the threads before
    // it (tiles in order, so each pass is stable).
    std::ptrdiff_t start = 0;
    for (std::ptrdiff_t slot = 0; slot < kDigits * threads; ++slot)
      start += std::exchange(count[slot], start);
#if defined(MNISTDP_THRUST_HOST_OPENMP)
#pragma omp parallel for num_threads(threads)
#endif
    for (std::ptrdiff_t t = 0; t < threads; ++t)
      for (std::ptrdiff_t i = tile(t); i < tile(t + 1); ++i)
        to[count[digit(from[i]) * threads + t]++] = from[i];
    std::swap(from, to);
  }
  thrust::return_temporary_buffer(policy, storage.first, storage.second);
}

}  // namespace

void epoch_order(Temporaries& temporaries, std::int32_t* order, std::uint64_t* keys, int count,
                 std::uint64_t shuffle_seed) {
  Allocator allocator(temporaries);
  thrust_ops::epoch_order(parallel(allocator), order, keys, count, shuffle_seed);
}

void mark_correct(Temporaries& temporaries, const float* logits, const std::uint8_t* labels,
                  std::uint8_t* correct, int rows, int classes) {
  Allocator allocator(temporaries);
  thrust_ops::mark_correct(parallel(allocator), logits, labels, correct, rows, classes);
}

long long count_marked(Temporaries& temporaries, const std::uint8_t* marks, int count) {
  Allocator allocator(temporaries);
  return thrust_ops::count_marked(parallel(allocator), marks, count);
}

double sum_in_double(Temporaries& temporaries, const float* values, int count) {
  Allocator allocator(temporaries);
  return thrust_ops::sum_in_double(parallel(allocator), values, count);
}

}  // namespace mnistdp::thrust_host
