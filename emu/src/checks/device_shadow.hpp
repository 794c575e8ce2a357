#pragma once
// Which bytes a kernel may touch, as a shadow byte for each 8: in device memory's range (arena.hpp), those
// of live allocations (poisoned: the guard zones after the allocations, freed memory and the range's end not
// yet handed out); in host memory, only what the kernel owns here and pinned memory (device_addresses.hpp),
// which the emulator allows as it hands it out; every other host byte is poisoned.
//
// In preset emu the kernels are compiled with AddressSanitizer's instrumentation alone
// (emu/cmake/cuda_sources.cmake): before each load and store, a few instructions inline read the address's
// shadow byte, and only a poisoned one calls out, to device_addresses::on_poisoned. This file is the small
// runtime that instrumentation needs in place of AddressSanitizer's: the shadow memory at AddressSanitizer's
// x86-64 offset, and the entry points the instrumented code calls. The shadow of host memory is made lazily,
// poisoned, where the instrumented code first reads it. In preset emu-asan `poison` and `unpoison` poison
// for AddressSanitizer itself, whose shadow of host memory is its own, and in a build without either they
// all do nothing.
#include <cstddef>
#include <vector>

namespace mnistdp::emu::device_shadow {

// Device memory: a kernel may not touch [begin, begin + bytes) / may touch it.
void poison(const void* begin, std::size_t bytes);
void unpoison(const void* begin, std::size_t bytes);

// Host memory a kernel may touch from now on (a fiber's stack, a block's shared memory, a launch's
// parameters, a pinned allocation), and no longer.
void allow(const void* begin, std::size_t bytes);
void disallow(const void* begin, std::size_t bytes);

// Device memory's range as the arena reserves it: `devices` parts of `part` bytes, aligned to 2 MiB,
// addressable until poisoned.
void device_range(const void* begin, std::size_t part, int devices);

// The kernels about to run may touch the memory of device d only where visible[d] (their own device's and
// their peers'): the shadow of every other device's part reads as poisoned, so that each access there is
// checked (device_addresses::check_access).
void show_devices(const std::vector<bool>& visible);

}  // namespace mnistdp::emu::device_shadow
