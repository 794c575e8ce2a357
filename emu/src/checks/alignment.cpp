// The check of misaligned accesses in preset emu (docs/emulation.md, "Alignment"). An H200 stops a kernel
// whose load or store is not aligned to its size (a float4 at an address 4 mod 16) with
// cudaErrorMisalignedAddress; a host core runs it. So the kernels of that preset are compiled with UBSan's
// alignment check alone (emu/cmake/cuda_sources.cmake), and with no UBSan runtime linked this handler takes
// its calls: inside an emulated kernel the running block ends with cudaErrorMisalignedAddress, sticky, naming
// the kernel, the block, the thread, the address and the type. The sanitizer presets link runtimes that hold
// UBSan's own handler, and are not built with this file.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "emu/src/device/block.hpp"

namespace {

// UBSan's records of the check, as GCC and clang lay them out (compiler-rt's ubsan_handlers.h, version 1).
struct SourceLocation {
  const char* file;
  std::uint32_t line;
  std::uint32_t column;
};
struct TypeDescriptor {
  std::uint16_t kind;
  std::uint16_t info;
  char name[1];  // as long as the name, with its quotes
};
struct TypeMismatchData {
  SourceLocation location;
  const TypeDescriptor* type;
  unsigned char log_alignment;
  unsigned char check_kind;
};

void misaligned(const TypeMismatchData* data, std::uintptr_t pointer) {
  const unsigned alignment = 1u << data->log_alignment;
  if (pointer % alignment == 0) return;  // the check calls only for misaligned pointers
  if (mnistdp::emu::misaligned_access(pointer, alignment, data->type->name)) return;
  // Host code of a kernel's file: undefined behaviour of the host's, named as UBSan names it.
  std::fprintf(stderr,
               "%s:%u:%u: runtime error: misaligned address 0x%llx for type %s, which requires %u byte "
               "alignment\n",
               data->location.file, data->location.line, data->location.column,
               static_cast<unsigned long long>(pointer), data->type->name, alignment);
  std::abort();
}

}  // namespace

// The kernels are compiled to go on after the check (-fsanitize-recover=alignment): the handler returns, and
// the block stops at its next switch.
extern "C" void __ubsan_handle_type_mismatch_v1(TypeMismatchData* data, std::uintptr_t pointer) {
  misaligned(data, pointer);
}
