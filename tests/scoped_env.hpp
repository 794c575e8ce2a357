#pragma once
// Sets an environment variable for a scope, and puts back what was there (the emulated NCCL reads its
// settings, MNISTDP_EMU_NCCL_POLLS and MNISTDP_EMU_NCCL_FAIL, when a communicator is made:
// docs/emulation.md).
#include <cstdlib>
#include <optional>
#include <string>

namespace mnistdp::testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace mnistdp::testing
