// ThreadTeam, which splits a CPU replica's step among threads: every member runs each task once, a barrier
// orders what members write before it and read after it, and an error reaches the caller without leaving a
// member stuck at a barrier.
#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "host/cpu/thread_team.hpp"

using mnistdp::ThreadTeam;

TEST_CASE("a thread team runs every member once per call", "[thread_team]") {
  for (int size : {1, 2, 3, 7}) {
    ThreadTeam team(size);
    REQUIRE(team.size() == size);
    std::vector<int> calls(static_cast<std::size_t>(size), 0);
    for (int round = 0; round < 1000; ++round)
      team.run([&](int member) { ++calls[static_cast<std::size_t>(member)]; });
    CHECK(calls == std::vector<int>(static_cast<std::size_t>(size), 1000));
  }
}

TEST_CASE("a thread team's barrier orders writes before it and reads after it", "[thread_team]") {
  // Each member writes its slot, waits, then reads every slot: without the barrier a member would see a slot
  // of the round before. Plain (non-atomic) ints, so that ThreadSanitizer would also report a missing edge.
  const int size = 4;
  ThreadTeam team(size);
  std::vector<int> slots(size, -1);
  std::vector<int> wrong(size, 0);
  for (int round = 0; round < 2000; ++round) {
    team.run([&](int member) {
      slots[static_cast<std::size_t>(member)] = round;
      team.barrier();
      for (int other = 0; other < size; ++other)
        wrong[static_cast<std::size_t>(member)] += slots[static_cast<std::size_t>(other)] != round;
      team.barrier();  // nobody writes the next round's slot while another still reads this one's
    });
  }
  CHECK(wrong == std::vector<int>(size, 0));
}

TEST_CASE("a thread team passes an error back and releases the members at a barrier", "[thread_team]") {
  ThreadTeam team(3);
  CHECK_THROWS_WITH(team.run([&](int member) {
    if (member == 2) throw std::runtime_error("member 2 failed");
    team.barrier();  // members 0 and 1 wait here for a member that never comes
  }),
                    "member 2 failed");
  // The team survives and keeps working, barriers included.
  std::atomic<int> passed{0};
  team.run([&](int) {
    team.barrier();
    ++passed;
  });
  CHECK(passed == 3);
}

TEST_CASE("a thread team of no members is refused", "[thread_team]") {
  CHECK_THROWS_AS(ThreadTeam(0), std::invalid_argument);
}
