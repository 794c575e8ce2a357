#pragma once
// Which bytes of device memory's range (arena.hpp) a kernel may touch: those of live allocations. Poisoned
// bytes are the guard zones after the allocations, freed memory and the range's end not yet handed out.
//
// In preset emu the kernels are compiled with AddressSanitizer's instrumentation alone (CMakeLists.txt,
// mnistdp_cuda_sources): before each load and store, a few instructions inline read the address's shadow
// byte, and only a poisoned one calls out, to device_addresses::check_access. This file is the small runtime
// that instrumentation needs in place of AddressSanitizer's: the shadow memory at AddressSanitizer's x86-64
// offset, written here for device memory only (every other byte's shadow is zero: addressable), and the
// entry points the instrumented code calls. In preset emu-asan the same calls poison for AddressSanitizer
// itself, and in a build without either they do nothing.
#include <cstddef>

namespace mnistdp::emu::device_shadow {

void poison(const void* begin, std::size_t bytes);
void unpoison(const void* begin, std::size_t bytes);

}  // namespace mnistdp::emu::device_shadow
