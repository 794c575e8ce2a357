#include <catch2/catch.hpp>
#include <filesystem>
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
  for (const GemmVersion& v : kGemmVersions) {
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
  CHECK(gemms_with_common_bits() ==
        std::vector<GemmImpl>{GemmImpl::naive, GemmImpl::tiled, GemmImpl::blocked, GemmImpl::slab});
  CHECK(gemm_names_text() == "naive, tiled, blocked, slab or cublas");
  CHECK(gemm_names_text(/*with_descriptions=*/true) ==
        "naive (one thread an element), tiled (shared-memory tiles), blocked (register-blocked), slab (small "
        "tiles, "
        "long k slabs) or cublas (cuBLAS, for comparison)");
  CHECK_THROWS_WITH(parse_gemm_impl("fast"),
                    Contains("'fast'") && Contains("naive, tiled, blocked, slab or cublas"));
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
