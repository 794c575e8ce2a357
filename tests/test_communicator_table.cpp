// The table of communicators (host/command/communicator_table.hpp): whole, consistent with the choice
// make_communicator makes, and documented.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "host/command/communicator_table.hpp"
#include "host/command/replica_setup.hpp"

using namespace mnistdp;

TEST_CASE("every communicator has one row: a unique name, its file, the layout that chooses it",
          "[communicators]") {
  const std::filesystem::path root(MNISTDP_SOURCE_DIR);
  std::ifstream in(root / "docs/architecture.md");
  const std::string architecture{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::set<std::string> names;
  for (const CommunicatorEntry& v : kCommunicators) {
    CAPTURE(v.name);
    CHECK(names.insert(v.name).second);
    CHECK(std::filesystem::exists(root / v.source));
    CHECK(communicator_for(v.layout) == v.kind);
    CHECK(&communicator_entry(v.kind) == &v);
    CHECK(architecture.find(std::string("| ") + v.name + " |") != std::string::npos);
  }
  // Several processes each hold one GPU: a shared device is a layout of one process only.
  CHECK(communicator_for({true, true, true}) == CommunicatorKind::nccl_ranks);
  CHECK(communicator_for({false, false, true}) == CommunicatorKind::host_sum);
}

TEST_CASE("make_communicator builds the table's choice for a CPU placement", "[communicators]") {
  Placement placement;
  placement.replicas = 2;
  const std::vector<std::unique_ptr<Replica>> none;
  const auto communicator = make_communicator(placement, none, nullptr, std::chrono::seconds(1));
  CHECK(communicator->description() == "in-process sum over host buffers");
}
