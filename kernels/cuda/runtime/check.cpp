#include "kernels/cuda/runtime/check.hpp"

namespace mnistdp::detail {

void throw_cuda_error(const char* library, const char* name, const char* message, const char* expr,
                      const char* file, int line) {
  std::string what = std::string(file) + ":" + std::to_string(line) + ": " + library + " error";
  if (name) what += std::string(" ") + name;
  what += std::string(": ") + (message ? message : "(no message)") + ", in " + expr;
  throw CudaError(what);
}

}  // namespace mnistdp::detail
