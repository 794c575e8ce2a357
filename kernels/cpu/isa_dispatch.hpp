#pragma once
// The one place where an Isa becomes the version of an operation to call, for every CPU operation with one
// version per instruction set (cpu::gemm, cpu::gather_normalize, cpu::transpose). The x86-64 versions are
// compiled only for x86-64 targets (kernels/CMakeLists.txt), so a build for another CPU cannot name them:
// MNISTDP_X86_VERSION(f) is f there and nullptr elsewhere, and asking for a version the build lacks throws.
// MNISTDP_CPU_GEMM_X86 is a private definition of the mnistdp_kernels_cpu library: the macro means what it
// says only in that library's files, and is nullptr in any other target that includes this header.
#include <stdexcept>
#include <string>

#include "kernels/cpu/gemm.hpp"

#if defined(MNISTDP_CPU_GEMM_X86)
#define MNISTDP_X86_VERSION(f) (&(f))
#else
#define MNISTDP_X86_VERSION(f) nullptr
#endif

namespace mnistdp::cpu {

// An operation's versions, all of one signature Fn. A missing portable version (nullptr) is a valid answer
// for operations whose caller has a plain loop of its own.
template <class Fn>
struct Versions {
  Fn* avx512;
  Fn* avx2;
  Fn* portable;
};

// The version of `what` for isa.
template <class Fn>
Fn* version(Isa isa, const char* what, const Versions<Fn>& versions) {
  switch (isa) {
    case Isa::avx512:
    case Isa::avx2: {
      Fn* chosen = isa == Isa::avx512 ? versions.avx512 : versions.avx2;
      if (chosen == nullptr)
        throw std::invalid_argument(std::string(what) + ": this build has no " + isa_name(isa) + " version");
      return chosen;
    }
    case Isa::portable:
      return versions.portable;
  }
  throw std::invalid_argument(std::string(what) + ": unknown instruction set");
}

}  // namespace mnistdp::cpu
