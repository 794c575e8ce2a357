#pragma once
// A test program's main, over Catch's implementation (compiled once, in tests/catch_session.cpp).

namespace testing {

// Decides, before any test runs, whether the program goes on: returns -1 to run the tests, or the exit status
// to stop with. `listing` is true when the command line only lists tests, tags or reporters.
using BeforeTests = int (*)(bool listing);

// Runs the tests that the command line names; `before` may be null.
int run_tests(int argc, char** argv, BeforeTests before);

}  // namespace testing
