#pragma once
// Ends a test that cannot run on this machine (one that needs two GPUs, or a kernel feature switched off)
// with exit code 77, which ctest reports as skipped. ctest runs every test in a process of its own
// (catch_discover_tests), so nothing else is cut short; Catch2 2 has no skip of its own.
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mnistdp::test {

[[noreturn]] inline void skip_test(const std::string& why) {
  std::printf("skipped: %s\n", why.c_str());
  std::fflush(stdout);
  std::exit(77);
}

}  // namespace mnistdp::test
