#pragma once
// Vectors whose first element starts a cache line. malloc aligns large blocks to 16 bytes only, so a 64-byte
// vector load of 16 floats at a multiple of 16 elements would straddle two lines, each such load and store
// costing two accesses; aligned, the rows of the step's matrices whose widths are multiples of 16 floats
// start lines too.
#include <cstddef>
#include <new>
#include <vector>

namespace mnistdp {

template <class T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::size_t kLine = 64;

  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kLine}));
  }
  // The unsized form: clang leaves sized deallocation off unless asked (-fsized-deallocation).
  void deallocate(T* p, std::size_t) noexcept { ::operator delete (p, std::align_val_t{kLine}); }

  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using CacheAlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace mnistdp
