// The TCP process group (host/processes/tcp_process_group.hpp), its ranks on threads of one process: the
// collectives, the sum's order, and every way a rendezvous or a run can fail, each within its timeout and
// with its reason.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "host/model/params.hpp"
#include "host/processes/tcp_frame.hpp"
#include "host/processes/tcp_process_group.hpp"
#include "host/processes/tcp_rendezvous.hpp"
#include "tests/temp_dir.hpp"

using namespace mnistdp;
using namespace std::chrono_literals;

namespace {

// A port nothing listens on now (the kernel's choice of a free ephemeral port).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t length = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// What one rank ended with: "" when it finished, else its error (RemoteRankError's text included).
struct Outcome {
  std::string error;
  bool remote = false;  // the error was another rank's
  int origin = -1;
};

// What the ranks' rendezvous noted (rank 0's dropped connections, its warning without a token).
class Notes {
 public:
  void add(const std::string& line) {
    std::lock_guard lock(mutex_);
    lines_.push_back(line);
  }
  bool has(const std::string& part) const {
    std::lock_guard lock(mutex_);
    for (const std::string& line : lines_)
      if (line.find(part) != std::string::npos) return true;
    return false;
  }
  std::string all() const {
    std::lock_guard lock(mutex_);
    std::string text;
    for (const std::string& line : lines_)
      text += line + "\n";
    return text;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

// The rendezvous of `rank` of `world` at 127.0.0.1:port (or `addr`), without a token.
TcpRendezvous rendezvous(int port, int rank, int world, std::chrono::milliseconds timeout,
                         const std::string& addr = "127.0.0.1") {
  TcpRendezvous r;
  r.master_addr = addr;
  r.master_port = port;
  r.rank = rank;
  r.world_size = world;
  r.timeout = timeout;
  return r;
}

// How the ranks of run_ranks are started, beyond their world and rank.
struct RankSetup {
  int world_of_rank_1 = 0;                       // 0: the world's size
  std::string token;                             // every rank's run token
  std::function<void(int rank)> before_joining;  // on each rank's thread, before it joins
  Notes* notes = nullptr;                        // where the rendezvous's notes go (nowhere when null)
};

// Runs `body` on each given rank, on threads, each with its own group, as run_cli does in a process: a
// rank that fails aborts its group with its message.
std::vector<Outcome> run_ranks(int world, const std::vector<int>& ranks, int port,
                               std::chrono::milliseconds timeout,
                               const std::function<void(ProcessGroup&)>& body, const RankSetup& setup = {}) {
  std::vector<Outcome> outcomes(ranks.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      const int rank = ranks[i];
      std::unique_ptr<ProcessGroup> group;
      try {
        if (setup.before_joining) setup.before_joining(rank);
        TcpRendezvous r = rendezvous(
            port, rank, rank == 1 && setup.world_of_rank_1 ? setup.world_of_rank_1 : world, timeout);
        r.token = setup.token;
        r.note = [&setup](const std::string& line) {
          if (setup.notes) setup.notes->add(line);
        };
        group = make_tcp_process_group(r);
        body(*group);
      } catch (const RemoteRankError& e) {
        outcomes[i] = {e.what(), true, e.rank()};
        if (group) group->abort(e.rank(), e.what());
      } catch (const std::exception& e) {
        outcomes[i] = {e.what(), false, rank};
        if (group) group->abort(rank, e.what());
      }
    });
  }
  for (auto& t : threads)
    t.join();
  return outcomes;
}

// A connection to rank 0's port, retried while rank 0 is not listening yet.
tcp::Socket connect_to(int port) {
  std::string why;
  for (int attempt = 0; attempt < 500; ++attempt) {
    if (tcp::Socket s = tcp::try_connect("127.0.0.1", port, why); s.open()) return s;
    std::this_thread::sleep_for(10ms);
  }
  FAIL("nothing listens on port " << port << ": " << why);
  return {};
}

// A process of the tests' own at the rendezvous, speaking mnist-dp's protocol as a stranger might.
class Stranger {
 public:
  explicit Stranger(int port) : socket_(connect_to(port)) {}

  // Reads rank 0's challenge and says hello as `rank` of `world`, proved with `token` (none when empty).
  void hello(int rank, int world, const std::string& token = "") {
    const tcp::Frame challenge = tcp::receive_frame(socket_, tcp::Deadline(5s), 1024);
    REQUIRE(challenge.type == tcp::FrameType::Challenge);
    REQUIRE(challenge.payload.size() == sizeof(tcp::Challenge));
    tcp::Challenge c{};
    std::memcpy(&c, challenge.payload.data(), sizeof c);
    tcp::Hello h{rank, world, token.empty() ? 0u : 1u, 0, Nonce{}, Proof{}};
    if (!token.empty()) h.proof = tcp::hello_proof(token, c.nonce, h);
    tcp::send_frame(socket_, tcp::FrameType::Hello, rank, std::as_bytes(std::span(&h, 1)), tcp::Deadline(5s));
  }

  // Rank 0's answer to the hello: the reason it was refused, or "(welcomed)".
  std::string answer() {
    const tcp::Frame frame = tcp::receive_frame(socket_, tcp::Deadline(10s), tcp::kMaxErrorBytes);
    if (frame.type == tcp::FrameType::Refused) return frame.text();
    if (frame.type == tcp::FrameType::Welcome) return "(welcomed)";
    return "(answered with frame type " + std::to_string(static_cast<int>(frame.type)) + ")";
  }

  std::string say_hello(int rank, int world, const std::string& token = "") {
    hello(rank, world, token);
    return answer();
  }

  tcp::Socket& socket() { return socket_; }

 private:
  tcp::Socket socket_;
};

std::vector<int> all_ranks(int world) {
  std::vector<int> ranks;
  for (int r = 0; r < world; ++r)
    ranks.push_back(r);
  return ranks;
}

// Values of mixed magnitudes, so that the order of the additions shows in the bits of the sum.
std::vector<float> values_of_rank(int rank, std::size_t n) {
  std::mt19937 gen(1234u + static_cast<unsigned>(rank));
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::vector<float> v(n);
  for (float& x : v)
    x = std::ldexp(mantissa(gen), exponent(gen));
  return v;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("TCP all-reduce: the sum in rank order, the same bits on every rank", "[tcp]") {
  for (int world : {2, 3, 5}) {
    CAPTURE(world);
    const std::size_t n = ParamLayout::kGradCount;  // a whole gradient buffer: many partial sends and reads
    std::vector<float> expected = values_of_rank(0, n);
    for (int r = 1; r < world; ++r) {
      const std::vector<float> part = values_of_rank(r, n);
      for (std::size_t i = 0; i < n; ++i)
        expected[i] += part[i];
    }
    std::vector<std::vector<float>> results(static_cast<std::size_t>(world));
    const auto outcomes = run_ranks(world, all_ranks(world), free_port(), 30s, [&](ProcessGroup& g) {
      std::vector<float> mine = values_of_rank(g.rank(), n);
      g.all_reduce_sum(mine);
      g.all_reduce_sum(mine);  // twice: the second sums the sums, world * (sum), checked below
      results[static_cast<std::size_t>(g.rank())] = std::move(mine);
    });
    for (const Outcome& o : outcomes)
      CHECK(o.error.empty());
    // After the second all-reduce every rank holds world copies of the first sum, added in rank order.
    std::vector<float> twice(expected);
    for (int r = 1; r < world; ++r)
      for (std::size_t i = 0; i < n; ++i)
        twice[i] += expected[i];
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      REQUIRE(results[static_cast<std::size_t>(r)].size() == n);
      CHECK(std::memcmp(results[static_cast<std::size_t>(r)].data(), twice.data(), n * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("TCP any and broadcast", "[tcp]") {
  const int world = 3;
  std::vector<std::vector<bool>> answers(world);
  std::vector<std::string> received(world);
  const auto outcomes = run_ranks(world, all_ranks(world), free_port(), 30s, [&](ProcessGroup& g) {
    auto& mine = answers[static_cast<std::size_t>(g.rank())];
    mine.push_back(g.any(false));
    mine.push_back(g.any(g.rank() == 2));
    mine.push_back(g.any(true));
    received[static_cast<std::size_t>(g.rank())] =
        broadcast_string(g, g.rank() == 0 ? std::string(100'000, 'x') + "rank 0's text" : "not this");
    require_same_on_all_ranks(g, {{"--seed", "3"}, {"--lr", "same everywhere"}});
  });
  for (int r = 0; r < world; ++r) {
    CAPTURE(r);
    CHECK(outcomes[static_cast<std::size_t>(r)].error.empty());
    CHECK(answers[static_cast<std::size_t>(r)] == std::vector<bool>{false, true, true});
    CHECK(received[static_cast<std::size_t>(r)] == std::string(100'000, 'x') + "rank 0's text");
  }
}

TEST_CASE("TCP: settings that differ on one rank are refused on every rank", "[tcp]") {
  const auto outcomes = run_ranks(3, all_ranks(3), free_port(), 30s, [](ProcessGroup& g) {
    require_same_on_all_ranks(g,
                              {{"--seed", "3"}, {"--lr", g.rank() == 1 ? "0.1" : "0.01"}, {"--epochs", "5"}});
  });
  CHECK(outcomes[1].error ==
        "rank 1 and rank 0 differ in --lr: rank 1 has 0.1, rank 0 has 0.01; every rank must be started with "
        "the same options and data");
  // Every rank names the same setting and both values.
  for (int r : {0, 2})
    CHECK(outcomes[static_cast<std::size_t>(r)].error == outcomes[1].error);
}

TEST_CASE("TCP: settings that differ on several ranks, or in number, are named alike on every rank",
          "[tcp]") {
  SECTION("two ranks differ: the lower one's first setting is named, and the count of the others") {
    const auto outcomes = run_ranks(4, all_ranks(4), free_port(), 30s, [](ProcessGroup& g) {
      require_same_on_all_ranks(
          g, {{"--lr", g.rank() == 1 ? "0.1" : "0.01"}, {"--epochs", g.rank() == 3 ? "2" : "5"}});
    });
    for (const Outcome& o : outcomes)
      CHECK(o.error ==
            "rank 1 (and 1 more rank) and rank 0 differ in --lr: rank 1 has 0.1, rank 0 has 0.01; every rank "
            "must be started with the same options and data");
  }
  SECTION("a rank with a setting rank 0 does not have") {
    const auto outcomes = run_ranks(2, all_ranks(2), free_port(), 30s, [](ProcessGroup& g) {
      std::vector<Setting> settings{{"--lr", "0.01"}};
      if (g.rank() == 1) settings.push_back({"--new-option", "1"});
      require_same_on_all_ranks(g, settings);
    });
    for (const Outcome& o : outcomes)
      CHECK(o.error ==
            "rank 1 and rank 0 differ in their settings' number or names (rank 0 has 1); every rank must be "
            "started with the same options and data (and the same mnist-dp)");
  }
}

TEST_CASE("TCP: a rank that fails stops every other rank with its message", "[tcp]") {
  const auto start = std::chrono::steady_clock::now();
  const auto outcomes = run_ranks(3, all_ranks(3), free_port(), 20s, [](ProcessGroup& g) {
    std::vector<float> v(1000, 1.0f);
    g.all_reduce_sum(v);
    if (g.rank() == 2) throw std::runtime_error("data error: rank 2's file is broken");
    for (int step = 0; step < 3; ++step)
      g.all_reduce_sum(v);
  });
  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(outcomes[2].error == "data error: rank 2's file is broken");
  for (int r : {0, 1}) {
    CAPTURE(r);
    CHECK(outcomes[static_cast<std::size_t>(r)].remote);
    CHECK(outcomes[static_cast<std::size_t>(r)].origin == 2);
    CHECK(outcomes[static_cast<std::size_t>(r)].error ==
          "rank 2 failed: data error: rank 2's file is broken");
  }
  CHECK(elapsed < 10s);  // at once, not after the 20 s timeout
}

TEST_CASE("TCP: rank 0 failing stops the others with its message", "[tcp]") {
  const auto outcomes = run_ranks(3, all_ranks(3), free_port(), 20s, [](ProcessGroup& g) {
    if (g.rank() == 0) throw std::runtime_error("cannot write the checkpoint");
    g.any(false);
  });
  CHECK(outcomes[0].error == "cannot write the checkpoint");
  for (int r : {1, 2})
    CHECK(outcomes[static_cast<std::size_t>(r)].error == "rank 0 failed: cannot write the checkpoint");
}

TEST_CASE("TCP: a rank that vanishes without a word is reported to the others", "[tcp]") {
  const auto start = std::chrono::steady_clock::now();
  const auto outcomes = run_ranks(3, all_ranks(3), free_port(), 20s, [](ProcessGroup& g) {
    g.any(false);
    if (g.rank() == 1) return;  // the group is destroyed: its connection closes, no message sent
    g.any(false);
  });
  CHECK(outcomes[1].error.empty());
  CHECK(contains(outcomes[0].error, "rank 1 vanished"));
  CHECK(contains(outcomes[2].error, "rank 1 vanished"));
  CHECK(std::chrono::steady_clock::now() - start < 10s);
}

TEST_CASE("TCP: a rank that is hung is named after the timeout", "[tcp]") {
  const auto outcomes = run_ranks(2, all_ranks(2), free_port(), 1000ms, [](ProcessGroup& g) {
    if (g.rank() == 1) std::this_thread::sleep_for(2500ms);
    g.any(false);
  });
  CHECK(outcomes[0].error == "waited 1 s for rank 1 to reach the same step (hung, or much slower?)");
}

TEST_CASE("TCP rendezvous: a rank with another WORLD_SIZE is refused, and rank 0 goes on waiting", "[tcp]") {
  const int port = free_port();
  RankSetup setup;
  setup.world_of_rank_1 = 3;
  Notes notes;
  setup.notes = &notes;
  const auto outcomes = run_ranks(
      2, all_ranks(2), port, 1500ms, [](ProcessGroup&) {}, setup);
  const std::string why =
      "it was started with a world of 3 processes, rank 0 with 2: every rank must be given the same "
      "WORLD_SIZE";
  CHECK(outcomes[1].error == "TCP rendezvous at 127.0.0.1:" + std::to_string(port) +
                                 ": rank 0 refused this process (rank 1): " + why);
  CHECK(contains(outcomes[0].error, "after 1.5 s, rank 1 of a world of 2 had not joined"));
  CAPTURE(notes.all());
  CHECK(notes.has("TCP rendezvous: dropped a connection from 127.0.0.1:"));
  CHECK(notes.has(why));
}

TEST_CASE("TCP rendezvous: a rank that never starts is named", "[tcp]") {
  const auto start = std::chrono::steady_clock::now();
  const int port = free_port();
  const auto outcomes = run_ranks(3, {0, 1}, port, 1000ms, [](ProcessGroup&) {});
  const std::string why =
      "TCP rendezvous on port " + std::to_string(port) +
      ": after 1 s, rank 2 of a world of 3 had not joined (were they started, with the same "
      "MASTER_ADDR and MASTER_PORT, and WORLD_SIZE=3?)";
  CHECK(outcomes[0].error == why);
  CHECK(outcomes[1].error == "rank 0 failed: " + why);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
}

TEST_CASE("TCP rendezvous: a second process that says it is rank 1 is refused, and the first stays",
          "[tcp]") {
  const int port = free_port();
  const std::string token = "one run's secret, long enough";
  RankSetup setup;
  setup.token = token;
  std::string second;
  std::optional<Stranger> first;
  setup.before_joining = [&](int rank) {
    if (rank != 2) return;
    // Both hold the token, as two ranks given the same RANK by mistake would.
    first.emplace(port);
    first->hello(1, 3, token);
    second = Stranger(port).say_hello(1, 3, token);
  };
  const auto outcomes = run_ranks(
      3, {0, 2}, port, 10s, [](ProcessGroup&) {}, setup);
  for (const Outcome& o : outcomes)
    CHECK(o.error.empty());
  CHECK(second == "rank 1 has joined already: every rank must be given its own RANK");
  REQUIRE(first);
  CHECK(first->answer() == "(welcomed)");
}

TEST_CASE("TCP rendezvous: rank 0 cannot be reached", "[tcp]") {
  const int port = free_port();
  const auto outcomes = run_ranks(2, {1}, port, 800ms, [](ProcessGroup&) {});
  CHECK(contains(outcomes[0].error, "TCP rendezvous: could not reach rank 0 at 127.0.0.1:" +
                                        std::to_string(port) + " within 0.8 s"));
  CHECK(contains(outcomes[0].error, "is rank 0 running, with the same MASTER_ADDR and MASTER_PORT?"));
}

TEST_CASE("TCP rendezvous: a port in use", "[tcp]") {
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  const int zero = 0;
  ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_any;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  socklen_t length = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
  const int port = ntohs(addr.sin6_port);
  const auto outcomes = run_ranks(2, {0}, port, 1000ms, [](ProcessGroup&) {});
  ::close(fd);
  CHECK(outcomes[0].error ==
        "TCP rendezvous: rank 0 cannot listen on port " + std::to_string(port) +
            " (MASTER_PORT): the port is in use (by another run, or another program); pick "
            "another MASTER_PORT");
}

TEST_CASE("TCP rendezvous: a MASTER_ADDR that does not resolve is retried, then named", "[tcp]") {
  // Retried, as a name may resolve only once rank 0's host is up; said once a few seconds in, so that a
  // rank does not wait its whole timeout in silence; named when the time is up.
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  Notes notes;
  try {
    TcpRendezvous r = rendezvous(29500, 1, 2, 6500ms, "no-such-host.invalid");
    r.note = [&notes](const std::string& line) { notes.add(line); };
    make_tcp_process_group(r);
  } catch (const std::exception& e) {
    error = e.what();
  }
  CHECK(contains(error,
                 "could not reach rank 0 at no-such-host.invalid:29500 within 6.5 s (MASTER_ADDR "
                 "no-such-host.invalid:"));
  const std::string noted = notes.all();
  CAPTURE(noted);
  CHECK(noted.rfind("TCP rendezvous: rank 1 is still trying to reach rank 0 at no-such-host.invalid:29500 "
                    "(MASTER_ADDR no-such-host.invalid: ",
                    0) == 0);
  CHECK(std::count(noted.begin(), noted.end(), '\n') == 1);  // said once
  CHECK(std::chrono::steady_clock::now() - start < 30s);
}

TEST_CASE("TCP rendezvous: a stray connection (a health check, a port scan) is dropped", "[tcp]") {
  const int port = free_port();
  std::thread stray([port] {
    // Connects before the ranks do (retrying until rank 0 listens), sends what is not a hello, and leaves.
    for (int attempt = 0; attempt < 100; ++attempt) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<std::uint16_t>(port));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
        const char junk[] = "GET / HTTP/1.0\r\n\r\n";
        static_cast<void>(::send(fd, junk, sizeof junk - 1, MSG_NOSIGNAL));
        ::close(fd);
        return;
      }
      ::close(fd);
      std::this_thread::sleep_for(10ms);
    }
  });
  std::this_thread::sleep_for(50ms);
  const auto outcomes =
      run_ranks(2, all_ranks(2), port, 10s, [](ProcessGroup& g) { CHECK_FALSE(g.any(false)); });
  stray.join();
  for (const Outcome& o : outcomes)
    CHECK(o.error.empty());
}

TEST_CASE("TCP rendezvous: only a process with the run token joins; strangers are dropped, the run goes on",
          "[tcp][security]") {
  const int port = free_port();
  const std::string token = "the run's secret, 32 characters";
  Notes notes;
  RankSetup setup;
  setup.token = token;
  setup.notes = &notes;
  std::string without_token, wrong_token;
  setup.before_joining = [&](int rank) {
    if (rank != 1) return;
    // Each says hello as rank 1 before the real rank 1 does: without the token it would take its place.
    without_token = Stranger(port).say_hello(1, 2);
    wrong_token = Stranger(port).say_hello(1, 2, "another run's secret, as long");
  };
  std::vector<float> sums(2);
  const auto outcomes = run_ranks(
      2, all_ranks(2), port, 10s,
      [&](ProcessGroup& g) {
        std::vector<float> v{static_cast<float>(g.rank() + 1)};
        g.all_reduce_sum(v);
        sums[static_cast<std::size_t>(g.rank())] = v[0];
      },
      setup);
  for (const Outcome& o : outcomes)
    CHECK(o.error.empty());
  CHECK(sums == std::vector<float>{3.0f, 3.0f});
  CHECK(without_token ==
        "it has no run token, and rank 0 has one: give every rank the same MNISTDP_RUN_TOKEN (or "
        "MNISTDP_RUN_TOKEN_FILE)");
  CHECK(wrong_token == "its run token is not rank 0's");
  CAPTURE(notes.all());
  CHECK(notes.has("TCP rendezvous: dropped a connection from 127.0.0.1:"));
  CHECK(notes.has(": its run token is not rank 0's"));
  CHECK_FALSE(notes.has("can join this run as a rank"));
}

TEST_CASE("TCP rendezvous: without a run token, rank 0 says the rendezvous is open to anyone",
          "[tcp][security]") {
  const int port = free_port();
  Notes notes;
  RankSetup setup;
  setup.notes = &notes;
  const auto outcomes = run_ranks(
      2, all_ranks(2), port, 10s, [](ProcessGroup& g) { g.any(false); }, setup);
  for (const Outcome& o : outcomes)
    CHECK(o.error.empty());
  CHECK(notes.all() == "TCP rendezvous: no run token (MNISTDP_RUN_TOKEN): any process that can reach port " +
                           std::to_string(port) +
                           " can join this run as a rank (docs/multi-node.md, \"Security\")\n");
}

TEST_CASE("TCP rendezvous: a rank whose token differs from rank 0's is refused by name", "[tcp][security]") {
  const int port = free_port();
  std::string refused;
  std::thread rank_1([&] {
    try {
      TcpRendezvous r = rendezvous(port, 1, 2, 1500ms);
      r.token = "rank 1's secret, not rank 0's";
      make_tcp_process_group(r);
    } catch (const std::exception& e) {
      refused = e.what();
    }
  });
  const auto outcomes = run_ranks(2, {0}, port, 1500ms, [](ProcessGroup&) {}, {});
  rank_1.join();
  CHECK(refused ==
        "TCP rendezvous at 127.0.0.1:" + std::to_string(port) +
            ": rank 0 refused this process (rank 1): it has a run token, and rank 0 has none: give every "
            "rank the same MNISTDP_RUN_TOKEN (or MNISTDP_RUN_TOKEN_FILE)");
  CHECK(contains(outcomes[0].error, "rank 1 of a world of 2 had not joined"));
}

TEST_CASE("TCP rendezvous: hellos that do not fit are dropped, each with its reason, and the run goes on",
          "[tcp][security]") {
  const int port = free_port();
  Notes notes;
  RankSetup setup;
  setup.notes = &notes;
  std::vector<std::string> answers;
  setup.before_joining = [&](int rank) {
    if (rank != 1) return;
    answers.push_back(Stranger(port).say_hello(1, 3));
    answers.push_back(Stranger(port).say_hello(0, 2));
    answers.push_back(Stranger(port).say_hello(5, 2));
    answers.push_back(Stranger(port).say_hello(-1, 2));
    // Not a hello at all: a frame header that announces far more than a hello.
    Stranger junk(port);
    const tcp::FrameHeader header{tcp::kMagic, tcp::FrameType::Data, 1, 0, 1 << 30};
    tcp::send_all(junk.socket(), &header, sizeof header, tcp::Deadline(5s));
  };
  const auto outcomes = run_ranks(
      2, all_ranks(2), port, 10s, [](ProcessGroup& g) { g.any(false); }, setup);
  for (const Outcome& o : outcomes)
    CHECK(o.error.empty());
  CHECK(answers ==
        std::vector<std::string>{
            "it was started with a world of 3 processes, rank 0 with 2: every rank must be given the "
            "same WORLD_SIZE",
            "it says it is rank 0, outside 1 to 1", "it says it is rank 5, outside 1 to 1",
            "it says it is rank -1, outside 1 to 1"});
  CAPTURE(notes.all());
  CHECK(notes.has("it says it is rank -1, outside 1 to 1"));
}

TEST_CASE("TCP rendezvous: silent and slow connections hold no rank up, and the rendezvous ends on time",
          "[tcp][security]") {
  SECTION("a rank joins while a silent connection and a slow one are waiting") {
    const int port = free_port();
    std::optional<Stranger> silent, slow;
    RankSetup setup;
    setup.before_joining = [&](int rank) {
      if (rank != 1) return;
      silent.emplace(port);
      slow.emplace(port);
      const char byte = 'x';
      tcp::send_all(slow->socket(), &byte, 1, tcp::Deadline(5s));
    };
    const auto start = std::chrono::steady_clock::now();
    const auto outcomes = run_ranks(
        2, all_ranks(2), port, 30s, [](ProcessGroup& g) { g.any(false); }, setup);
    for (const Outcome& o : outcomes)
      CHECK(o.error.empty());
    CHECK(std::chrono::steady_clock::now() - start < 4s);  // not after the stranger's 5 s
  }
  SECTION("a new connection every 200 ms, each sending a byte, does not keep rank 0 past its timeout") {
    const int port = free_port();
    std::atomic<bool> done{false};
    std::thread dripping([&] {
      std::vector<tcp::Socket> kept;
      while (!done) {
        std::string why;
        if (tcp::Socket s = tcp::try_connect("127.0.0.1", port, why); s.open()) {
          const char byte = 'x';
          static_cast<void>(::send(s.fd(), &byte, 1, MSG_NOSIGNAL));
          kept.push_back(std::move(s));
        }
        std::this_thread::sleep_for(200ms);
      }
    });
    const auto start = std::chrono::steady_clock::now();
    const auto outcomes = run_ranks(3, {0, 1}, port, 1000ms, [](ProcessGroup&) {}, {});
    const auto elapsed = std::chrono::steady_clock::now() - start;
    done = true;
    dripping.join();
    CHECK(contains(outcomes[0].error, "after 1 s, rank 2 of a world of 3 had not joined"));
    CHECK(elapsed < 3s);
  }
}

TEST_CASE("TCP rendezvous: 400 silent connections do not end rank 0, and the real rank still joins",
          "[tcp][security]") {
  const int port = free_port();
  Notes notes;
  RankSetup setup;
  setup.notes = &notes;
  std::vector<tcp::Socket> crowd;
  setup.before_joining = [&](int rank) {
    if (rank != 1) return;
    crowd.push_back(connect_to(port));
    std::string why;
    for (int i = 1; i < 400; ++i)
      if (tcp::Socket s = tcp::try_connect("127.0.0.1", port, why); s.open()) crowd.push_back(std::move(s));
  };
  const auto outcomes = run_ranks(
      2, all_ranks(2), port, 30s, [](ProcessGroup& g) { g.any(false); }, setup);
  for (const Outcome& o : outcomes)
    CHECK(o.error.empty());
  CHECK(crowd.size() == 400);
  CAPTURE(notes.all());
  CHECK(notes.has("more than 64 connections had not said hello; the oldest went"));
  CHECK(notes.has("connections dropped in all"));
}

TEST_CASE("TCP rendezvous: rank 0 out of file descriptors drops its oldest connection and goes on",
          "[tcp][security]") {
  // Rank 0 runs in a child process whose descriptors a stranger of its own has used up, so that its accept
  // fails with EMFILE; the real rank 1 runs here, with descriptors to spare.
  const int port = free_port();
  const test::TempDir dir;
  const std::string report = (dir / "rank0").string();
  int ready[2];  // the child writes a byte here once rank 0 has no descriptor left
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(ready[0]);
    std::string outcome = "joined";
    Notes notes;
    {
      const rlimit limit{256,
                         256};  // above what rank 0 reserves for a world of 2, below what the stranger takes
      if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) std::_Exit(3);
      std::thread rank_0([&] {
        try {
          TcpRendezvous r = rendezvous(port, 0, 2, 20s);
          r.note = [&notes](const std::string& line) { notes.add(line); };
          make_tcp_process_group(r);
        } catch (const std::exception& e) {
          outcome = e.what();
        }
      });
      // Three silent connections, each accepted (its challenge read), then every descriptor left: rank 0 has
      // none for the next connection.
      std::vector<tcp::Socket> held;
      std::string why;
      while (held.size() < 3) {
        if (tcp::Socket s = tcp::try_connect("127.0.0.1", port, why); s.open()) {
          static_cast<void>(tcp::receive_frame(s, tcp::Deadline(10s), 1024));
          held.push_back(std::move(s));
        } else {
          std::this_thread::sleep_for(10ms);
        }
      }
      std::vector<int> files;
      for (int fd; (fd = ::open("/dev/null", O_RDONLY)) >= 0;)
        files.push_back(fd);
      const char byte = 1;
      if (::write(ready[1], &byte, 1) != 1) std::_Exit(4);
      rank_0.join();
      for (int fd : files)
        ::close(fd);
    }
    std::ofstream(report) << outcome << "\n" << notes.all();
    std::_Exit(0);
  }
  ::close(ready[1]);  // so that the read below ends if the child does
  char byte = 0;
  const bool child_ready = ::read(ready[0], &byte, 1) == 1;
  ::close(ready[0]);
  REQUIRE(child_ready);
  std::string error;
  try {
    make_tcp_process_group(rendezvous(port, 1, 2, 20s));
  } catch (const std::exception& e) {
    error = e.what();
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  std::ifstream in(report);
  const std::string rank_0((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CAPTURE(rank_0);
  CHECK(error.empty());
  CHECK(rank_0.rfind("joined\n", 0) == 0);
  CHECK(contains(rank_0,
                 "TCP rendezvous: accept: Too many open files: the oldest connections that have not said "
                 "hello are dropped to make room"));
  CHECK(contains(rank_0, ": rank 0 ran out of file descriptors"));
}

TEST_CASE("TCP rendezvous: a rank 0 that cannot prove the run token is not trusted", "[tcp][security]") {
  // Another program holds MASTER_PORT and plays rank 0: it challenges and welcomes, but knows no token.
  const int port = free_port();
  std::thread impostor([port] {
    std::string where;
    const tcp::Socket listener = tcp::listen_on(port, "127.0.0.1", where);
    tcp::Accepted a;
    for (int i = 0; i < 500 && !a.socket.open(); ++i) {
      std::this_thread::sleep_for(10ms);
      a = tcp::accept_connection(listener);
    }
    REQUIRE(a.socket.open());
    const tcp::Challenge c{fresh_nonce()};
    tcp::send_frame(a.socket, tcp::FrameType::Challenge, 0, std::as_bytes(std::span(&c, 1)),
                    tcp::Deadline(5s));
    static_cast<void>(tcp::receive_frame(a.socket, tcp::Deadline(5s), 1024));
    const tcp::Welcome w{};
    tcp::send_frame(a.socket, tcp::FrameType::Welcome, 0, std::as_bytes(std::span(&w, 1)), tcp::Deadline(5s));
  });
  std::string error;
  try {
    TcpRendezvous r = rendezvous(port, 1, 2, 5s);
    r.token = "the real run's secret, 32 chars";
    make_tcp_process_group(r);
  } catch (const std::exception& e) {
    error = e.what();
  }
  impostor.join();
  CHECK(error ==
        "TCP rendezvous at 127.0.0.1:" + std::to_string(port) +
            ": what answers as rank 0 does not prove this run's token: another program, or a run with "
            "another MNISTDP_RUN_TOKEN, holds MASTER_PORT");
}

TEST_CASE("TCP rendezvous: rank 0 listens on MASTER_ADDR's interface, or on every one when told",
          "[tcp][security]") {
  std::string note, why;
  SECTION("MASTER_ADDR 127.0.0.1: 127.0.0.2, another address of this machine, is not listened on") {
    const int port = free_port();
    const tcp::Socket listener = tcp::listen_on(port, "127.0.0.1", note);
    CHECK(note.empty());
    CHECK(tcp::try_connect("127.0.0.1", port, why).open());
    CHECK_FALSE(tcp::try_connect("127.0.0.2", port, why).open());
  }
  SECTION("every interface (--listen-all)") {
    const int port = free_port();
    const tcp::Socket listener = tcp::listen_on(port, "", note);
    CHECK(note.empty());
    CHECK(tcp::try_connect("127.0.0.2", port, why).open());
  }
  SECTION("a MASTER_ADDR that is no address of this machine: every interface, and why") {
    const int port = free_port();
    const tcp::Socket listener = tcp::listen_on(port, "192.0.2.1", note);  // TEST-NET-1, never assigned
    CHECK(note == "MASTER_ADDR 192.0.2.1 is no address of this machine: rank 0 listens on every interface");
    CHECK(tcp::try_connect("127.0.0.2", port, why).open());
  }
}

TEST_CASE("TCP rendezvous: missing ranks are named as ranges", "[tcp]") {
  CHECK(tcp::rank_ranges({}).empty());
  CHECK(tcp::rank_ranges({4}) == "4");
  CHECK(tcp::rank_ranges({1, 2, 3, 7, 9, 10, 11, 12}) == "1-3, 7, 9-12");
  CHECK(tcp::rank_ranges({1, 3}) == "1, 3");
}

TEST_CASE("TCP check_for_failure: another rank's failure, at once, without taking a collective's data",
          "[tcp]") {
  SECTION("a failing rank is heard by ranks that are not in a collective") {
    const auto start = std::chrono::steady_clock::now();
    const auto outcomes = run_ranks(3, all_ranks(3), free_port(), 20s, [](ProcessGroup& g) {
      g.any(false);
      if (g.rank() == 2) throw std::runtime_error("out of device memory");
      // Ranks 0 and 1 wait for something outside the group (as for NCCL), looking at the group meanwhile.
      for (int i = 0; i < 2000; ++i) {
        g.check_for_failure();
        std::this_thread::sleep_for(5ms);
      }
    });
    CHECK(outcomes[2].error == "out of device memory");
    CHECK(outcomes[0].error == "rank 2 failed: out of device memory");
    CHECK(outcomes[1].error == "rank 2 failed: out of device memory");
    CHECK(std::chrono::steady_clock::now() - start < 8s);
  }
  SECTION("a rank already in the next collective is left to it") {
    std::vector<bool> answers(2);
    const auto outcomes = run_ranks(2, all_ranks(2), free_port(), 20s, [&answers](ProcessGroup& g) {
      if (g.rank() == 0) {
        std::this_thread::sleep_for(200ms);  // rank 1's vote has arrived by now
        g.check_for_failure();
        g.check_for_failure();
      }
      answers[static_cast<std::size_t>(g.rank())] = g.any(g.rank() == 1);
    });
    CHECK(outcomes[0].error.empty());
    CHECK(outcomes[1].error.empty());
    CHECK(answers == std::vector<bool>{true, true});
  }
}
