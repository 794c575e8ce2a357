// The table of strategies (host/command/strategy_table.hpp): whole, each row saying what its Strategy says of
// itself, and documented; --strategy's choices and help taken from it.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "host/command/strategy_table.hpp"
#include "host/cpu/cpu_replica.hpp"
#include "tests/synthetic_data.hpp"

using namespace mnistdp;

TEST_CASE("every strategy has one row: a unique name, its file, documented, the default first",
          "[strategies]") {
  const std::filesystem::path root(MNISTDP_SOURCE_DIR);
  std::ifstream in(root / "docs/architecture.md");
  const std::string architecture{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  CHECK(std::string(kStrategies[0].name) == TrainOptions{}.strategy);
  std::set<std::string> names;
  const std::string help = strategy_help();
  for (const StrategyEntry& row : kStrategies) {
    CAPTURE(row.name);
    CHECK(names.insert(row.name).second);
    CHECK(std::filesystem::exists(root / row.source));
    CHECK(&strategy_entry(row.name) == &row);
    CHECK(help.find(std::string(row.name) + " (" + row.torch + "'s: " + row.summary + ")") !=
          std::string::npos);
    CHECK(architecture.find(std::string("| `") + row.name + "` |") != std::string::npos);
    CHECK(std::string(row.start_line).find("{}") != std::string::npos);
  }
  std::vector<std::string> in_order;
  for (const StrategyEntry& row : kStrategies)
    in_order.emplace_back(row.name);
  CHECK(strategy_names() == in_order);  // the table's order: the default first
  CHECK_THROWS_WITH(strategy_entry("ring"), Catch::Contains("'ring'"));
}

TEST_CASE("each strategy row is what its Strategy says of itself, made for CPU replicas", "[strategies]") {
  const DataSplits data = testing::synthetic_splits(70, 10, 5);
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int r = 0; r < 2; ++r)
    replicas.push_back(std::make_unique<CpuReplica>(data, r));
  Placement placement;
  placement.replicas = 2;
  for (const StrategyEntry& row : kStrategies) {
    CAPTURE(row.name);
    const std::unique_ptr<Strategy> strategy =
        row.make({placement, replicas, nullptr, std::chrono::seconds(1)});
    REQUIRE(strategy);
    CHECK(strategy->across_processes() == row.across_processes);
    CHECK(strategy->every_replica_steps() == row.every_replica_steps);
    CHECK_FALSE(strategy->description().empty());
  }
}
