// Catch's implementation, compiled once for every test program of a build (library mnistdp_catch): it takes
// longer to compile than any test file.
#define CATCH_CONFIG_RUNNER
#include "tests/catch_session.hpp"

#include <catch2/catch.hpp>

namespace testing {

int run_tests(int argc, char** argv, BeforeTests before) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const Catch::ConfigData& config = session.configData();
  const bool listing =
      config.listTests || config.listTestNamesOnly || config.listTags || config.listReporters;
  if (before != nullptr) {
    if (const int rc = before(listing); rc >= 0) return rc;
  }
  return session.run();
}

}  // namespace testing
