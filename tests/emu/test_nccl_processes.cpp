// The emulated NCCL across processes and its ring order (docs/emulation.md, "NCCL"): ranks in processes of
// their own (this program started again, running the hidden test case below as one rank) join one unique
// id and all-reduce through shared memory; every rank gets the same bits, and each element's sum is one of
// the ring's rotations, not rank order for every element. A peer killed before the all-reduce is reported
// through ncclCommGetAsyncError as ncclRemoteError, and ncclCommAbort ends the all-reduce held on the
// stream; its twin, the peer alive, completes.
#include <nccl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/runtime/memory.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/temp_dir.hpp"

extern char** environ;

namespace mnistdp {
namespace {

using Catch::Matchers::Contains;
using Clock = std::chrono::steady_clock;

constexpr char kPeerTest[] = "a rank of the cross-process NCCL tests in a process of its own";
constexpr char kPeerVariable[] = "MNISTDP_TEST_NCCL_PEER";

std::uint64_t hash(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Rank r's send buffer: magnitudes from 2^-8 to 2^8, so that the order of a sum of three shows in its bits.
std::vector<float> input(int rank, std::size_t count) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t h = hash(static_cast<std::uint64_t>(rank) << 40 ^ i);
    const float unit = static_cast<float>(h >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
    v[i] = std::ldexp(unit, static_cast<int>(h % 17) - 8);
  }
  return v;
}

std::string hex(const ncclUniqueId& id) {
  std::string s;
  for (char c : id.internal) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(c));
    s += b;
  }
  return s;
}

ncclUniqueId unhex(const std::string& s) {
  ncclUniqueId id{};
  for (std::size_t i = 0; i < sizeof id.internal && 2 * i + 1 < s.size(); ++i)
    id.internal[i] = static_cast<char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  return id;
}

void write_floats(const std::string& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
}

std::vector<float> read_floats(const std::string& path, std::size_t count) {
  std::vector<float> v(count);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * sizeof(float)));
  REQUIRE(in.gcount() == static_cast<std::streamsize>(count * sizeof(float)));
  return v;
}

// Polls a non-blocking communicator until its call completes (or 60 s pass: a failure of the test).
ncclResult_t poll(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (state == ncclInProgress && Clock::now() < deadline) {
    REQUIRE(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return state;
}

// Joins `id` as `rank` of `nranks` (blocking or not), and all-reduces rank's input of `count` in place.
std::vector<float> all_reduce_as_rank(const ncclUniqueId& id, int rank, int nranks, std::size_t count,
                                      bool nonblocking) {
  CUDA_CHECK(cudaSetDevice(0));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = nonblocking ? 0 : 1;
  ncclComm_t comm = nullptr;
  const ncclResult_t init = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  INFO(ncclGetLastError(comm));
  REQUIRE((init == ncclSuccess || (nonblocking && init == ncclInProgress)));
  if (nonblocking) REQUIRE(poll(comm) == ncclSuccess);
  DeviceBuffer<float> buffer = gpu_test::to_device(input(rank, count));
  Stream s;
  const ncclResult_t r =
      ncclAllReduce(buffer.data(), buffer.data(), count, ncclFloat, ncclSum, comm, s.get());
  REQUIRE((r == ncclSuccess || (nonblocking && r == ncclInProgress)));
  if (nonblocking) REQUIRE(poll(comm) == ncclSuccess);
  s.synchronize();
  ncclResult_t state = ncclInProgress;
  REQUIRE(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  REQUIRE(state == ncclSuccess);
  std::vector<float> result = gpu_test::to_host(buffer);
  if (nonblocking) {
    const ncclResult_t f = ncclCommFinalize(comm);
    REQUIRE((f == ncclSuccess || f == ncclInProgress));
    REQUIRE(poll(comm) == ncclSuccess);
  }
  REQUIRE(ncclCommDestroy(comm) == ncclSuccess);
  return result;
}

// Ranks in processes of their own: this program, running kPeerTest with `spec` ("ID RANK NRANKS MODE COUNT
// OUT") in the environment. Each is killed and reaped, if still running, when this ends.
class Peers {
 public:
  void start(const std::string& spec, const std::vector<std::string>& extra_env = {}) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e)
      if (std::strncmp(*e, kPeerVariable, sizeof kPeerVariable - 1) != 0) env.emplace_back(*e);
    env.push_back(std::string(kPeerVariable) + "=" + spec);
    for (const std::string& e : extra_env)
      env.push_back(e);
    std::vector<char*> envp;
    for (std::string& e : env)
      envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
    std::string test = kPeerTest;
    char* argv[] = {exe.data(), test.data(), nullptr};
    pid_t pid = 0;
    REQUIRE(posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, envp.data()) == 0);
    pids_.push_back(pid);
  }
  pid_t pid(std::size_t i) const { return pids_.at(i); }
  // Waits for every peer; returns whether all exited 0.
  bool wait_all() {
    bool ok = true;
    for (pid_t& pid : pids_) {
      int status = 0;
      if (pid > 0 && waitpid(pid, &status, 0) == pid)
        ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
      pid = 0;
    }
    return ok;
  }
  void kill_one(std::size_t i) {
    pid_t& pid = pids_.at(i);
    ::kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    pid = 0;
  }
  ~Peers() {
    for (std::size_t i = 0; i < pids_.size(); ++i)
      if (pids_[i] > 0) kill_one(i);
  }

 private:
  std::vector<pid_t> pids_;
};

std::string spec(const ncclUniqueId& id, int rank, int nranks, const char* mode, std::size_t count,
                 const std::string& out) {
  return hex(id) + " " + std::to_string(rank) + " " + std::to_string(nranks) + " " + mode + " " +
         std::to_string(count) + " " + out;
}

// The sum of element i starting at rank `first` and going round the ring.
float ring_sum(const std::vector<std::vector<float>>& in, std::size_t i, int first) {
  const int n = static_cast<int>(in.size());
  float acc = in[static_cast<std::size_t>(first)][i];
  for (int k = 1; k < n; ++k)
    acc += in[static_cast<std::size_t>((first + k) % n)][i];
  return acc;
}

// What NCCL's ring guarantees and no more: every element's sum is one of the ring's rotations. Returns how
// many elements differ from the sum in rank order (the rotation from rank 0), which NCCL does not give.
std::size_t check_ring_order(const std::vector<float>& got, int nranks) {
  std::vector<std::vector<float>> in;
  for (int r = 0; r < nranks; ++r)
    in.push_back(input(r, got.size()));
  std::size_t not_rank_order = 0;
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    bool some = false;
    for (int first = 0; first < nranks && !some; ++first) {
      const float want = ring_sum(in, i, first);
      some = std::memcmp(&got[i], &want, sizeof(float)) == 0;
    }
    mismatches += some ? 0 : 1;
    if (ring_sum(in, i, 0) != got[i]) ++not_rank_order;
  }
  CHECK(mismatches == 0);
  return not_rank_order;
}

}  // namespace

// Run by the tests below in a process of its own; skipped when run without them.
TEST_CASE("a rank of the cross-process NCCL tests in a process of its own", "[.][nccl-peer]") {
  const char* text = std::getenv(kPeerVariable);
  if (!text) return;
  std::istringstream words(text);
  std::string id_hex;
  std::string mode;
  std::string out;
  int rank = 0;
  int nranks = 0;
  std::size_t count = 0;
  words >> id_hex >> rank >> nranks >> mode >> count >> out;
  if (mode == "sum") {
    write_floats(out, all_reduce_as_rank(unhex(id_hex), rank, nranks, count, false));
  } else if (mode == "stall") {
    // Joins and then never calls the all-reduce, until killed.
    ncclComm_t comm = nullptr;
    REQUIRE(ncclCommInitRankConfig(&comm, nranks, unhex(id_hex), rank, nullptr) == ncclSuccess);
    std::this_thread::sleep_for(std::chrono::seconds(120));
  } else if (mode == "clique") {
    // Every rank in this process, one emulated device each (ncclCommInitAll).
    std::vector<ncclComm_t> comms(static_cast<std::size_t>(nranks));
    REQUIRE(ncclCommInitAll(comms.data(), nranks, nullptr) == ncclSuccess);
    std::vector<DeviceBuffer<float>> buffers;
    for (int r = 0; r < nranks; ++r) {
      CUDA_CHECK(cudaSetDevice(r));
      buffers.push_back(gpu_test::to_device(input(r, count)));
    }
    REQUIRE(ncclGroupStart() == ncclSuccess);
    for (int r = 0; r < nranks; ++r) {
      CUDA_CHECK(cudaSetDevice(r));
      float* p = buffers[static_cast<std::size_t>(r)].data();
      REQUIRE(ncclAllReduce(p, p, count, ncclFloat, ncclSum, comms[static_cast<std::size_t>(r)], nullptr) ==
              ncclSuccess);
    }
    REQUIRE(ncclGroupEnd() == ncclSuccess);
    std::vector<float> first;
    for (int r = 0; r < nranks; ++r) {
      CUDA_CHECK(cudaSetDevice(r));
      const std::vector<float> got = gpu_test::to_host(buffers[static_cast<std::size_t>(r)]);
      if (r == 0) first = got;
      REQUIRE(gpu_test::bitwise_equal(got, first));
    }
    for (ncclComm_t c : comms)
      REQUIRE(ncclCommDestroy(c) == ncclSuccess);
    write_floats(out, first);
  } else {
    FAIL("unknown mode " << mode);
  }
}

TEST_CASE("ranks in processes of their own all-reduce in the ring's order, every rank the same bits",
          "[emu][nccl]") {
  const test::TempDir dir;
  // Past a slot's 2^20 floats, so that the all-reduce goes through the shared memory in two pieces.
  constexpr std::size_t kCount = (std::size_t{1} << 20) + 4099;
  constexpr int kRanks = 3;
  // Run 0 and 1: rank 0 in this process, non-blocking, its peers blocking, all with this process's seed.
  // Run 2 and on: every rank in a process of its own, with another seed, until one draws other chunks.
  const char* own = std::getenv("MNISTDP_EMU_SEED");
  const long seed = own && *own ? std::stol(own) : 1;
  std::vector<std::vector<float>> results;
  for (int run = 0; run < 5; ++run) {
    CAPTURE(run);
    const bool here = run < 2;
    std::vector<std::string> env;
    if (!here) env.push_back("MNISTDP_EMU_SEED=" + std::to_string(seed + run - 1));
    ncclUniqueId id{};
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    const std::string internal = id.internal;
    const std::string name = internal.substr(internal.find(':') + 1);
    CHECK(std::filesystem::exists("/dev/shm" + name));
    Peers peers;
    std::vector<std::string> outs;
    for (int r = here ? 1 : 0; r < kRanks; ++r) {
      outs.push_back((dir.path() / ("rank" + std::to_string(r))).string());
      peers.start(spec(id, r, kRanks, "sum", kCount, outs.back()), env);
    }
    const std::vector<float> mine =
        here ? all_reduce_as_rank(id, 0, kRanks, kCount, true) : std::vector<float>();
    REQUIRE(peers.wait_all());
    const std::vector<float> rank0 = here ? mine : read_floats(outs.front(), kCount);
    // Every rank joined: the name is gone, and the id joins nothing more.
    CHECK_FALSE(std::filesystem::exists("/dev/shm" + name));
    ncclComm_t late = nullptr;
    CHECK(ncclCommInitRankConfig(&late, kRanks, id, 1, nullptr) == ncclInvalidArgument);
    CHECK_THAT(std::string(ncclGetLastError(nullptr)), Contains("names no rendezvous"));
    for (const std::string& out : outs)
      CHECK(gpu_test::bitwise_equal(read_floats(out, kCount), rank0));
    // NCCL's guarantee, and the emulator no kinder: many elements are not the sum in rank order.
    CHECK(check_ring_order(rank0, kRanks) > kCount / 100);
    results.push_back(rank0);
    if (!here && !gpu_test::bitwise_equal(results.back(), results.front())) break;
  }
  // Seeded: the same seed, the same bits; another seed, other chunks, and so other bits somewhere (a seed
  // may draw the same chunks: up to three are tried).
  CHECK(gpu_test::bitwise_equal(results[0], results[1]));
  CHECK_FALSE(gpu_test::bitwise_equal(results.back(), results[0]));
}

TEST_CASE("the emulated NCCL's devices of one process all-reduce in the ring's order too", "[emu][nccl]") {
  const test::TempDir dir;
  constexpr std::size_t kCount = 100003;
  const std::string out = (dir.path() / "clique").string();
  Peers peers;
  peers.start(spec(ncclUniqueId{}, 0, 3, "clique", kCount, out), {"MNISTDP_EMU_DEVICES=3"});
  REQUIRE(peers.wait_all());
  CHECK(check_ring_order(read_floats(out, kCount), 3) > kCount / 100);
}

TEST_CASE("an NCCL peer process killed before the all-reduce is reported, and ncclCommAbort ends it",
          "[emu][nccl]") {
  CUDA_CHECK(cudaSetDevice(0));
  constexpr std::size_t kCount = 1000;
  for (const bool killed : {true, false}) {
    CAPTURE(killed);
    ncclUniqueId id{};
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    Peers peers;
    peers.start(spec(id, 1, 2, "stall", kCount, "-"));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const ncclResult_t init = ncclCommInitRankConfig(&comm, 2, id, 0, &config);
    REQUIRE((init == ncclSuccess || init == ncclInProgress));
    REQUIRE(poll(comm) == ncclSuccess);  // the peer has joined
    if (killed) peers.kill_one(0);
    DeviceBuffer<float> buffer = gpu_test::to_device(std::vector<float>(kCount, 1.0f));
    Stream s;
    const ncclResult_t r =
        ncclAllReduce(buffer.data(), buffer.data(), kCount, ncclFloat, ncclSum, comm, s.get());
    REQUIRE((r == ncclSuccess || r == ncclInProgress));
    REQUIRE(poll(comm) == ncclSuccess);  // posted on the stream
    // As the multi-process communicator waits: the stream queried, NCCL's error state watched. A peer that
    // is alive but never calls leaves both waiting (NCCL hangs); a dead one is NCCL's remote error.
    ncclResult_t state = ncclSuccess;
    const auto until = Clock::now() + (killed ? std::chrono::seconds(30) : std::chrono::milliseconds(300));
    while (state == ncclSuccess && Clock::now() < until) {
      CHECK(cudaStreamQuery(s.get()) == cudaErrorNotReady);
      REQUIRE(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (killed) {
      if (state != ncclRemoteError) {
        // Not reported: the abort still ends the all-reduce, so that the test ends.
        CHECK(ncclCommAbort(comm) == ncclSuccess);
        FAIL("the killed peer was not reported: " << ncclGetErrorString(state));
      }
      CHECK_THAT(std::string(ncclGetLastError(comm)), Contains("rank 1 of 2 (process"));
      CHECK_THAT(std::string(ncclGetLastError(comm)), Contains("exited"));
      // Every call but the abort is refused; the all-reduce stays held on its stream.
      CHECK(ncclCommDestroy(comm) == ncclInvalidUsage);
    } else {
      CHECK(state == ncclSuccess);
    }
    CHECK(cudaStreamQuery(s.get()) == cudaErrorNotReady);
    // The abort ends it: the stream drains, the result undefined (NaN here).
    CHECK(ncclCommAbort(comm) == ncclSuccess);
    s.synchronize();
    const std::vector<float> after = gpu_test::to_host(buffer);
    CHECK(std::isnan(after.front()));
    CHECK(cudaGetLastError() == cudaSuccess);
  }
}

TEST_CASE("a rank of a communicator across processes is refused what NCCL refuses", "[emu][nccl]") {
  CUDA_CHECK(cudaSetDevice(0));
  ncclComm_t comm = nullptr;
  // An id that ncclGetUniqueId did not make.
  CHECK(ncclCommInitRankConfig(&comm, 2, ncclUniqueId{}, 0, nullptr) == ncclInvalidArgument);
  CHECK_THAT(std::string(ncclGetLastError(nullptr)), Contains("did not make"));
  ncclUniqueId id{};
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  CHECK(ncclCommInitRankConfig(&comm, 2, id, 2, nullptr) == ncclInvalidArgument);
  // Two ranks of one communicator in this process: the emulation runs one per process.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  REQUIRE(ncclCommInitRankConfig(&comm, 2, id, 0, &config) == ncclInProgress);
  ncclComm_t second = nullptr;
  CHECK(ncclCommInitRankConfig(&second, 2, id, 1, &config) == ncclInvalidUsage);
  CHECK_THAT(std::string(ncclGetLastError(nullptr)), Contains("one rank per process"));
  // Still in progress: rank 1 has not joined.
  ncclResult_t state = ncclSuccess;
  REQUIRE(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  CHECK(state == ncclInProgress);
  CHECK(ncclCommAbort(comm) == ncclSuccess);
}

}  // namespace mnistdp
