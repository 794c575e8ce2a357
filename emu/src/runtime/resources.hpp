#pragma once
// What a kernel holds of an SM, counted as an H200 counts it (docs/emulation.md, "Launch resources"): its
// registers, barriers, static shared memory and __launch_bounds__ come from the GPU build's own ptxas report,
// made at build time (emu/cmake/kernel_resources.cmake) and registered by each .cu file as the program
// starts; the limits of a launch and the occupancy of an SM follow from them by the rules of compute
// capability 9.0, those of the toolkit's occupancy calculator (cuda_occupancy.h), which tests/emu checks.
#include <cstddef>
#include <string>
#include <vector>

#include "emu/launch.hpp"

namespace mnistdp::emu::resources {

// Compute capability 9.0 (the CUDA C++ Programming Guide's technical specifications; cuda_occupancy.h).
inline constexpr int kMaxThreadsPerBlock = 1024;
inline constexpr int kWarpSize = 32;
inline constexpr int kMaxThreadsPerSm = 2048;
inline constexpr int kMaxBlocksPerSm = 32;
inline constexpr int kRegistersPerSm = 65536;
inline constexpr int kRegistersPerBlock = 65536;
inline constexpr int kMaxRegistersPerThread = 255;
inline constexpr int kRegisterGranularity = 256;  // a warp's registers are allocated in units of 256
inline constexpr int kSubPartitions = 4;          // an SM's register file is split among its 4 schedulers
inline constexpr int kBarriersPerSm = 2 * kMaxBlocksPerSm;
inline constexpr std::size_t kSharedPerBlock = 48 * 1024;        // without cudaFuncSetAttribute
inline constexpr std::size_t kSharedPerBlockOptin = 227 * 1024;  // with it
inline constexpr std::size_t kSharedPerSm = 228 * 1024;
inline constexpr std::size_t kSharedReservedPerBlock = 1024;  // the driver's, in every block
inline constexpr std::size_t kSharedGranularity = 128;

// A registered kernel: its figures, its name and file for messages, and what follows from the figures.
struct Kernel {
  KernelResources figures;
  std::string name;               // demangled
  std::string source;             // the .cu file, relative to the project
  int max_threads_per_block = 0;  // cudaFuncAttributes::maxThreadsPerBlock: its launch bounds or registers
};

// The registered kernel whose host function is at `address` (matched by its symbol in the program's symbol
// table); nullptr, with `why`, if there is none.
const Kernel* find(const void* address, std::string& why);

// Every kernel registered by the program's .cu files (for tests).
std::vector<Kernel> registered();

// The most threads a block of a kernel of these figures may have: its __launch_bounds__, and the registers
// a block may hold (64 K, allocated a warp at a time and in whole groups of 4 warps).
int max_threads_per_block(const KernelResources& figures);

// The blocks of `block_threads` threads and `dynamic_shared` bytes that one SM holds at once, with
// `max_dynamic_shared` the kernel's limit (cudaFuncAttributeMaxDynamicSharedMemorySize); 0 if none fits.
// cudaOccupancyMaxActiveBlocksPerMultiprocessor's figure, by cuda_occupancy.h's rules for 9.0.
int blocks_per_sm(const KernelResources& figures, int block_threads, std::size_t dynamic_shared,
                  std::size_t max_dynamic_shared);

// A kernel's limit of dynamic shared memory on `device`: what cudaFuncSetAttribute set, or by default what
// keeps the block within 48 KiB.
std::size_t max_dynamic_shared(int device, const void* address, const Kernel& kernel);

// Forgets what cudaFuncSetAttribute set on `device` (cudaDeviceReset).
void forget_attributes(int device);

}  // namespace mnistdp::emu::resources
