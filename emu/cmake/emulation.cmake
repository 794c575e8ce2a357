# The emulated build's settings for the whole project (MNISTDP_CUDA=EMU, docs/emulation.md): included by the
# top-level CMakeLists.txt in its own scope, since its options apply to every target and its variables to the
# emulated .cu files of every folder (cuda_sources.cmake). The emulator itself is built by emu/CMakeLists.txt.
# Of the toolkit, only its headers' Thrust and its compiler (for the kernels' resources, below) are used, at
# build time.
# No fused multiply-add but those written as fmaf: nvcc contracts nothing else in the kernels either.
add_compile_options(-ffp-contract=off)
# fmaf as one instruction rather than a call into libm (the kernels' sums are chains of them), where the
# building machine has FMA; the emulated build runs where it is built.
include(CheckCXXSourceRuns)
check_cxx_source_runs("int main() { return __builtin_cpu_supports(\"fma\") ? 0 : 1; }" MNISTDP_EMU_HOST_FMA)
set(MNISTDP_EMU_FMA_FLAG "")
if(MNISTDP_EMU_HOST_FMA)
  set(MNISTDP_EMU_FMA_FLAG "-mfma")
endif()
# The sanitizer builds (presets emu-asan and emu-tsan): every emulated CUDA thread's accesses checked as a
# host thread's are. Everything is built so, as the sanitizers require of one process.
if(MNISTDP_EMU_SANITIZER STREQUAL "address")
  # Every call of a stack kept, calls in tail position included: a report's stack names every caller, and
  # tests/docs/check_step_frames.py reads a step's whole way to its first launch off gdb's backtrace.
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-optimize-sibling-calls)
  add_link_options(-fsanitize=address,undefined)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC's flow analysis, perturbed by ASan's instrumentation, warns of uninitialised reads in the standard
    # library's <regex> (included by Catch2) that do not happen; the sanitizer itself checks the real ones.
    add_compile_options(-Wno-maybe-uninitialized)
  endif()
elseif(MNISTDP_EMU_SANITIZER STREQUAL "thread")
  add_compile_options(-fsanitize=thread)
  add_link_options(-fsanitize=thread)
elseif(NOT MNISTDP_EMU_SANITIZER STREQUAL "")
  message(FATAL_ERROR "MNISTDP_EMU_SANITIZER is '${MNISTDP_EMU_SANITIZER}': address, thread or empty")
endif()
# The check of device addresses in a build without a sanitizer: the compiler's AddressSanitizer
# instrumentation in the kernels, with the emulator's own small runtime in place of the sanitizer's
# (emu/src/checks/device_shadow.hpp).
if(CMAKE_CXX_COMPILER_ID MATCHES "^(Clang|GNU)$" AND MNISTDP_EMU_SANITIZER STREQUAL "")
  set(MNISTDP_EMU_DEVICE_SHADOW ON)
else()
  set(MNISTDP_EMU_DEVICE_SHADOW OFF)
endif()
# The check of misaligned accesses (emu/src/checks/alignment.cpp): UBSan's alignment check in the kernels,
# with the emulator's handler, in a build without a sanitizer. The sanitizer presets' runtimes carry UBSan's
# own handler, and their clang 14 checks no aggregate's copy (a float4 loaded whole) in any case.
if(CMAKE_CXX_COMPILER_ID MATCHES "^(Clang|GNU)$" AND MNISTDP_EMU_SANITIZER STREQUAL "")
  set(MNISTDP_EMU_ALIGNMENT_CHECK ON)
else()
  set(MNISTDP_EMU_ALIGNMENT_CHECK OFF)
endif()
if(MNISTDP_EMU_BLOCK_RACES AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "MNISTDP_EMU_BLOCK_RACES needs clang (SanitizerCoverage's load and store callbacks)")
endif()
# Each kernel's registers, barriers, static shared memory and __launch_bounds__ as the GPU build's ptxas
# reports them, made at build time (cuda_sources.cmake), so that the emulated launches, their occupancy and
# cooperative residency are an H200's: the toolkit's compiler is needed for that, though nothing it makes is
# run (docs/emulation.md, "Launch resources").
find_program(MNISTDP_NVCC nvcc HINTS $ENV{CUDA_HOME}/bin $ENV{CUDA_PATH}/bin /usr/local/cuda/bin REQUIRED)
get_filename_component(mnistdp_nvcc_dir "${MNISTDP_NVCC}" DIRECTORY)
find_program(MNISTDP_PTXAS ptxas HINTS "${mnistdp_nvcc_dir}" NO_DEFAULT_PATH REQUIRED)

include(${CMAKE_CURRENT_LIST_DIR}/cuda_sources.cmake)
