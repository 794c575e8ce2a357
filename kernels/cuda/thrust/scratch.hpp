#pragma once
// Device memory for Thrust's temporaries, kept from call to call. Thrust's default allocator calls
// cudaMalloc and cudaFree inside every algorithm that needs scratch space (a sort does), and cudaFree waits
// for the whole device; with this allocator the first call allocates and every later one reuses the block.
// Thrust takes it as the allocator of an execution policy: thrust::cuda::par_nosync(scratch).on(stream).
//
// For the algorithms of one stream only: Thrust hands a block back as soon as it has queued the kernels that
// use it, so a block is safe to hand out again only to work queued after them on the same stream.
#include <cstddef>
#include <vector>

#include "kernels/cuda/runtime/memory.hpp"

namespace mnistdp {

class ThrustScratch {
 public:
  using value_type = char;  // what Thrust's allocator interface asks for

  ThrustScratch() = default;
  ThrustScratch(const ThrustScratch&) = delete;
  ThrustScratch& operator=(const ThrustScratch&) = delete;

  // A free block of at least `bytes`, allocated (on the current device) only when none is free.
  char* allocate(std::ptrdiff_t bytes);
  void deallocate(char* block, std::size_t bytes) noexcept;

  std::size_t bytes() const;  // device memory held
  int allocations() const { return static_cast<int>(blocks_.size()); }

 private:
  struct Block {
    DeviceBuffer<char> memory;
    bool in_use = false;
  };
  std::vector<Block> blocks_;
};

}  // namespace mnistdp
