# The .cu files of a target in the emulated build (mnistdp_cuda_sources in the top-level CMakeLists.txt):
# C++ for the host compiler, with the device dialect included first, as nvcc includes its runtime header
# first (nvcc's `#pragma unroll`, a hint, means nothing to it), and then, for a file that defines kernels,
# their ptxas figures for sm_90, made by compiling its device side with nvcc and ptxas as the GPU build does
# (kernel_resources.cmake, a second or so a file, in parallel with the rest of the build): a launch of a
# kernel with no figures is refused. Its settings are emulation.cmake's, read where it is called.
function(mnistdp_emu_cuda_sources)
  set(options -Wno-unknown-pragmas ${MNISTDP_EMU_FMA_FLAG} -include ${PROJECT_SOURCE_DIR}/emu/include/emu/dialect.hpp)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    # clang honours nvcc's `#pragma unroll` where it can, and warns where instrumentation keeps it from it.
    list(APPEND options -Wno-pass-failed)
  endif()
  if(MNISTDP_EMU_DEVICE_SHADOW)
    # The check of device addresses (emu/src/checks/device_addresses.hpp): AddressSanitizer's inline shadow
    # check before every load and store, alone, against the emulator's shadow of device memory
    # (emu/src/checks/device_shadow.hpp), which reports and goes on.
    list(APPEND options -fsanitize=address -fsanitize-recover=address -fno-sanitize-address-use-after-scope)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
      list(APPEND options -mllvm -asan-stack=0 -mllvm -asan-globals=0 -fsanitize-address-use-after-return=never)
    else()
      list(APPEND options --param=asan-stack=0 --param=asan-globals=0)
    endif()
  endif()
  if(MNISTDP_EMU_ALIGNMENT_CHECK)
    # Every load and store checked for its type's alignment (emu/src/checks/alignment.cpp): a misaligned one
    # ends the kernel with cudaErrorMisalignedAddress once the thread reaches its next switch.
    list(APPEND options -fsanitize=alignment -fsanitize-recover=alignment)
  endif()
  if(MNISTDP_EMU_BLOCK_RACES)
    # The checks of races between blocks and of device addresses (emu/src/checks/block_races.hpp,
    # device_addresses.hpp) are told of every load and store. Not vectorised, so that no access is wider
    # than the 16 bytes their callbacks cover.
    list(APPEND options -fsanitize-coverage=func,trace-pc-guard,trace-loads,trace-stores -fno-vectorize
                        -fno-slp-vectorize)
  endif()
  foreach(source IN LISTS ARGN)
    get_filename_component(path "${source}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    # A file whose text has no kernel (thrust_ops.cu: Thrust's kernels are not emulated) is left out; one
    # that gains a kernel needs CMake run again, or its launches are refused for want of figures.
    file(READ "${path}" text)
    if(NOT text MATCHES "__global__")
      set_source_files_properties("${source}" DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} PROPERTIES
        LANGUAGE CXX COMPILE_OPTIONS "${options}")
      continue()
    endif()
    file(RELATIVE_PATH name "${PROJECT_SOURCE_DIR}" "${path}")
    set(figures "${PROJECT_BINARY_DIR}/kernel_resources/${name}.hpp")
    add_custom_command(OUTPUT "${figures}"
      COMMAND ${CMAKE_COMMAND} -DNVCC=${MNISTDP_NVCC} -DPTXAS=${MNISTDP_PTXAS} -DSOURCE=${path} -DNAME=${name}
              -DINCLUDE=${PROJECT_SOURCE_DIR} -DOUT=${figures} -DDEPFILE=${figures}.d
              -P ${PROJECT_SOURCE_DIR}/emu/cmake/kernel_resources.cmake
      DEPENDS "${path}" "${PROJECT_SOURCE_DIR}/emu/cmake/kernel_resources.cmake"
      DEPFILE "${figures}.d"
      COMMENT "ptxas's figures of ${name} (sm_90), for its emulated launches"
      VERBATIM)
    set_source_files_properties("${source}" DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} PROPERTIES
      LANGUAGE CXX COMPILE_OPTIONS "${options};-include;${figures}" OBJECT_DEPENDS "${figures}")
  endforeach()
endfunction()
