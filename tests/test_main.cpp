// The CPU tests' entry point.
#include "tests/catch_session.hpp"

int main(int argc, char** argv) {
  return testing::run_tests(argc, argv, nullptr);
}
