#pragma once
// The command line shared by the sanitizer builds' probes: `PROGRAM CASE` runs one case and exits 0 (1 when
// it throws, 2 for an unknown case). The sanitizer, not the program, decides whether a case passes.
#include <cstddef>
#include <cstdio>
#include <exception>
#include <string_view>

namespace mnistdp::emu_probe {

struct Case {
  std::string_view name;
  void (*run)();
};

template <std::size_t N>
int run_case(const char* program, const Case (&cases)[N], int argc, char** argv) {
  if (argc == 2) {
    for (const Case& c : cases) {
      if (c.name != argv[1]) continue;
      try {
        c.run();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s %s: %s\n", program, argv[1], e.what());
        return 1;
      }
      std::printf("%s %s: ran to the end\n", program, argv[1]);
      return 0;
    }
  }
  std::fprintf(stderr, "usage: %s CASE, one of:", program);
  for (const Case& c : cases)
    std::fprintf(stderr, " %.*s", static_cast<int>(c.name.size()), c.name.data());
  std::fprintf(stderr, "\n");
  return 2;
}

}  // namespace mnistdp::emu_probe
