#pragma once
// The emulated build's Thrust: the CUDA path's algorithms (thrust_ops.cuh) run by Thrust's host system on
// emulated device memory, which is host memory, in parallel (OpenMP) and with every temporary taken from the
// caller's Temporaries, as a GPU's Thrust takes them from ThrustScratch. kernels/cuda/thrust/thrust_ops.cu
// queues them on a stream, where a GPU build runs the same algorithms on the device. Built apart from the
// emulation's stand-in headers (kernels/CMakeLists.txt): no CUDA type crosses this interface.
#include <cstddef>
#include <cstdint>

namespace mnistdp::thrust_host {

// Where Thrust's temporaries come from: ThrustScratch's allocator interface
// (kernels/cuda/thrust/scratch.hpp), seen without its CUDA types. Asked from one thread at a time.
class Temporaries {
 public:
  virtual char* allocate(std::ptrdiff_t bytes) = 0;
  virtual void deallocate(char* block, std::size_t bytes) noexcept = 0;

 protected:
  ~Temporaries() = default;
};

// Each throws what `temporaries` throws, after the algorithm has stopped using its memory.
void epoch_order(Temporaries& temporaries, std::int32_t* order, std::uint64_t* keys, int count,
                 std::uint64_t shuffle_seed);
void mark_correct(Temporaries& temporaries, const float* logits, const std::uint8_t* labels,
                  std::uint8_t* correct, int rows, int classes);
long long count_marked(Temporaries& temporaries, const std::uint8_t* marks, int count);
double sum_in_double(Temporaries& temporaries, const float* values, int count);

// The shape of the emulated reduction (sum_in_double, count_marked): items summed in sequence in leaves of
// kReduceLeaf, then the leaves' sums added in pairs, level by level, and the initial value added last.
inline constexpr int kReduceLeaf = 4;

}  // namespace mnistdp::thrust_host
