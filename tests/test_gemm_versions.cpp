#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/command/cli.hpp"
#include "kernels/cuda/gemm/gemm_version.hpp"

using namespace mnistdp;
using Catch::Matchers::Contains;

// The table of GEMM versions (kernels/cuda/gemm/gemm_version.hpp) is where the command line, the tests and
// the benchmarks take their lists from: it must be whole and consistent.
TEST_CASE("every GEMM version has one row: a unique name, its file, a way back from its name",
          "[gemm_versions]") {
  std::set<std::string> names;
  std::set<GemmImpl> impls;
  for (const GemmEntry& v : kGemmVersions) {
    CAPTURE(v.name);
    CHECK(names.insert(std::string(v.name)).second);
    CHECK(impls.insert(v.impl).second);
    CHECK(parse_gemm_impl(v.name) == v.impl);
    CHECK(gemm_impl_name(v.impl) == v.name);
    CHECK(std::filesystem::exists(std::filesystem::path(MNISTDP_SOURCE_DIR) / std::string(v.source)));
    CHECK(v.common_bits != v.needs_cublas);  // the library neither sums in the common order nor runs alone
  }
  CHECK(gemm_names().size() == kGemmVersions.size());
  CHECK(all_gemms().size() == kGemmVersions.size());
  // The lists follow the table, row for row, and describe each row as it says of itself.
  std::vector<GemmImpl> common;
  std::string text, described;
  for (std::size_t i = 0; i < kGemmVersions.size(); ++i) {
    const GemmEntry& v = kGemmVersions[i];
    CHECK(all_gemms()[i] == v.impl);
    CHECK(gemm_names()[i] == v.name);
    if (v.common_bits) common.push_back(v.impl);
    const std::string separator = i == 0 ? "" : i + 1 == kGemmVersions.size() ? " or " : ", ";
    text += separator + std::string(v.name);
    described += separator + std::string(v.name) + " (" + std::string(v.description) + ")";
  }
  CHECK(gemms_with_common_bits() == common);
  CHECK(common.size() + 1 == kGemmVersions.size());  // cuBLAS alone sums in an order of its own
  CHECK(gemm_names_text() == text);
  CHECK(gemm_names_text(/*with_descriptions=*/true) == described);
  CHECK_THROWS_WITH(parse_gemm_impl("fast"), Contains("'fast'") && Contains(text));
}

TEST_CASE("the command line's --gemm takes exactly the table's names", "[gemm_versions][cli]") {
  for (const std::string& name : gemm_names()) {
    CAPTURE(name);
    const char* argv[] = {"mnist-dp", "train", "--gemm", name.c_str()};
    CHECK(parse_command_line(4, argv).train.gemm == name);
  }
  const char* bad[] = {"mnist-dp", "train", "--gemm", "fast"};
  CHECK_THROWS(parse_command_line(4, bad));
}

TEST_CASE("README's option table lists exactly the table's GEMM versions", "[gemm_versions][docs]") {
  std::ifstream readme(std::filesystem::path(MNISTDP_SOURCE_DIR) / "README.md");
  REQUIRE(readme);
  std::string expected = "| `--gemm ";
  for (std::size_t i = 0; i < kGemmVersions.size(); ++i)
    expected += (i == 0 ? "" : "\\|") + std::string(kGemmVersions[i].name);
  expected += "` |";
  bool found = false;
  for (std::string line; std::getline(readme, line);)
    if (line.rfind("| `--gemm ", 0) == 0) {
      CHECK(line.rfind(expected, 0) == 0);
      found = true;
    }
  CHECK(found);
}
