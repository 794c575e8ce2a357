#include <catch2/catch.hpp>

#include "host/training/shard.hpp"

using namespace mnistdp;

TEST_CASE("shards follow torch.chunk's sizes", "[shard]") {
  auto sizes = [](int batch, int replicas) {
    std::vector<int> s;
    for (int r = 0; r < replicas; ++r)
      s.push_back(shard_of(batch, replicas, r).count);
    return s;
  };
  CHECK(sizes(64, 1) == std::vector<int>{64});
  CHECK(sizes(64, 3) == std::vector<int>{22, 22, 20});
  CHECK(sizes(64, 8) == std::vector<int>{8, 8, 8, 8, 8, 8, 8, 8});
  CHECK(sizes(32, 5) == std::vector<int>{7, 7, 7, 7, 4});
  CHECK(sizes(5, 4) == std::vector<int>{2, 2, 1, 0});
  CHECK(sizes(3, 8) == std::vector<int>{1, 1, 1, 0, 0, 0, 0, 0});
}

TEST_CASE("shards tile the batch in order", "[shard]") {
  for (int batch = 1; batch <= 70; ++batch)
    for (int replicas = 1; replicas <= 70; ++replicas) {
      int next = 0;
      for (int r = 0; r < replicas; ++r) {
        const Shard s = shard_of(batch, replicas, r);
        REQUIRE(s.count >= 0);
        REQUIRE(s.first == next);
        next += s.count;
      }
      REQUIRE(next == batch);
    }
}
