// mnist-dp-process-group-bench: the host-side collectives of a multi-process run, timed on the processes a
// launcher started, with the process group mnist-dp itself would use there (MPI under mpirun; the TCP group
// through rank 0 under torchrun's or Slurm's variables). No GPU is needed.
//
//   mpirun -np N mnist-dp-process-group-bench [--warmup W] [--repeats R] [--json FILE]
//   RANK=r WORLD_SIZE=N LOCAL_RANK=r MASTER_ADDR=127.0.0.1 MASTER_PORT=P mnist-dp-process-group-bench ...
//
// What a training step sends, each timed on its own:
//   all_reduce_sum   the flat gradient buffer, ParamLayout::kGradCount floats (814,124 bytes), once a step;
//   any(false)       the one-byte "does any rank want to stop" vote taken before every step;
//   broadcast        4 KB from rank 0 (the size of the start-up messages; --broadcast-bytes changes it).
//
// Each is checked first: rank r contributes (r + 1) * (i % 1000 + 1) at element i, so that every element of
// the sum is a small whole number, exact in float whatever the order of the additions, and every rank's
// result is compared with it element by element (after every timed all-reduce too). any() must say false when
// every rank says false and true when only the last one says true; every rank must receive rank 0's broadcast
// bytes.
//
// Timing: W warm-up operations, then R timings of one operation each. Before each timing the ranks meet in an
// any(false), so that every rank starts the operation at about the same time and a timing measures the
// collective, not how late a rank arrived. A timing is the slowest rank's (its own steady_clock), as
// nccl-tests reports the slowest rank; the median over the R timings, with the 10th and 90th percentiles.
// algbw = bytes / time; busbw = algbw * 2 (n - 1) / n, the convention of nccl-tests' PERFORMANCE.md (what
// each link of a ring would carry; the TCP group is a hub, not a ring, so there it is a figure to compare
// with, not its traffic).
//
// Exit status: 0 when every check passed; 1 when a check or a collective failed; 2 for bad options or a
// launch that is not multi-process.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_stats.hpp"
#include "host/command/cli.hpp"
#include "host/command/train_command.hpp"
#include "host/model/params.hpp"
#include "host/processes/launch.hpp"
#include "host/processes/process_group.hpp"

namespace mnistdp::bench {
namespace {

constexpr const char* kProgram = "mnist-dp-process-group-bench";
constexpr std::size_t kGradFloats = ParamLayout::kGradCount;
constexpr std::size_t kGradBytes = kGradFloats * sizeof(float);

// Bad options, or a launch this program cannot run in: exit status 2, as mnist-dp's usage errors.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A collective that returned a wrong result on this rank.
class CheckFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Options {
  int warmup = 20;
  int repeats = 100;
  std::size_t broadcast_bytes = 4096;
  std::string json_path;
  std::string launcher = "auto";
  double timeout_seconds = 60.0;
};

// The "model name" line of /proc/cpuinfo (lscpu's "Model name"); empty when there is none.
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? "" : line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "";
}

// The value rank `rank` contributes at element i, and the exact sum over a world of n: small whole numbers,
// so that the sum is exact in float in any order of addition, and an element that went to the wrong place
// (i % 1000 differs) or a rank counted twice or not at all shows.
float contribution(int rank, std::size_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 1000 + 1));
}
float expected_sum(int world, std::size_t i) {
  return static_cast<float>(world * (world + 1) / 2 * static_cast<int>(i % 1000 + 1));
}

// The number of elements of `values` that differ from the exact sum; the first one in `first_bad`.
std::size_t count_wrong(std::span<const float> values, int world, std::string& first_bad) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < values.size(); ++i)
    if (values[i] != expected_sum(world, i)) {
      if (wrong == 0)
        first_bad = fmt::format("element {} is {}, the sum is {}", i, values[i], expected_sum(world, i));
      ++wrong;
    }
  return wrong;
}

// Runs the checks on every rank. A rank that finds a wrong result says which; every rank learns (through
// any()) that one failed, so that all of them stop, each saying whether the failure was its own.
void check_collectives(ProcessGroup& group, std::size_t broadcast_bytes) {
  const int rank = group.rank(), world = group.size();
  std::vector<std::string> problems;

  std::vector<float> values(kGradFloats);
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = contribution(rank, i);
  group.all_reduce_sum(values);
  std::string first_bad;
  if (const std::size_t wrong = count_wrong(values, world, first_bad); wrong > 0)
    problems.push_back(fmt::format("all_reduce_sum of {} floats: {} elements differ from the exact sum ({})",
                                   kGradFloats, wrong, first_bad));

  if (group.any(false)) problems.emplace_back("any(false) on every rank returned true");
  if (!group.any(rank == world - 1))
    problems.push_back(fmt::format("any() returned false although rank {} said true", world - 1));

  // Rank 0 sends a pattern; every other rank starts from its complement, so that a byte left untouched shows.
  std::vector<std::byte> bytes(broadcast_bytes);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const auto pattern = static_cast<unsigned char>((i * 7 + 3) & 0xff);
    bytes[i] = std::byte{rank == 0 ? pattern : static_cast<unsigned char>(~pattern)};
  }
  group.broadcast(bytes);
  std::size_t wrong_bytes = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i)
    if (bytes[i] != std::byte{static_cast<unsigned char>((i * 7 + 3) & 0xff)}) ++wrong_bytes;
  if (wrong_bytes > 0)
    problems.push_back(
        fmt::format("broadcast of {} bytes: {} bytes differ from rank 0's", broadcast_bytes, wrong_bytes));

  std::string mine;
  for (const std::string& p : problems)
    mine += (mine.empty() ? "" : "; ") + p;
  if (group.any(!mine.empty())) {
    if (!mine.empty()) throw CheckFailed(fmt::format("check failed on rank {}: {}", rank, mine));
    throw CheckFailed("a check failed on another rank (that rank says which)");
  }
}

// One operation to time, and (optionally) what to do before and after each one, outside the timing.
struct Operation {
  std::string name;
  std::size_t bytes = 0;
  std::function<void()> prepare;  // before each operation, untimed
  std::function<void()> run;
  std::function<void()> verify;  // after each timed operation, untimed; throws CheckFailed
};

struct Result {
  std::string name;
  std::size_t bytes = 0;
  Stats slowest;  // per timing, the slowest rank's time
  Stats rank0;    // rank 0's own times
  std::vector<double> rank_medians;
};

// Times `op` on every rank (see the top of the file) and gathers every rank's timings on every rank.
Result time_operation(ProcessGroup& group, const Operation& op, const Options& o) {
  using Clock = std::chrono::steady_clock;
  const auto n = static_cast<std::size_t>(group.size());
  const auto me = static_cast<std::size_t>(group.rank());
  const auto repeats = static_cast<std::size_t>(o.repeats);
  for (int i = 0; i < o.warmup; ++i) {
    if (op.prepare) op.prepare();
    op.run();
  }
  std::vector<double> mine(repeats);
  for (std::size_t t = 0; t < repeats; ++t) {
    if (op.prepare) op.prepare();
    group.any(false);  // start together
    const auto start = Clock::now();
    op.run();
    mine[t] = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (op.verify) op.verify();
  }
  // Every rank's timings, through the group itself: rank r writes its row, the others leave zeros, and the
  // sum is exact (x + 0 = x). A float keeps a time below 100 ms to better than 0.01 us.
  std::vector<float> table(n * repeats, 0.0f);
  for (std::size_t t = 0; t < repeats; ++t)
    table[me * repeats + t] = static_cast<float>(mine[t]);
  group.all_reduce_sum(table);

  Result r{op.name, op.bytes, {}, {}, {}};
  std::vector<double> slowest(repeats, 0.0);
  for (std::size_t rank = 0; rank < n; ++rank) {
    std::vector<double> row(repeats);
    for (std::size_t t = 0; t < repeats; ++t) {
      row[t] = static_cast<double>(table[rank * repeats + t]);
      slowest[t] = std::max(slowest[t], row[t]);
    }
    const Stats s = summarize(row, 1);
    r.rank_medians.push_back(s.median);
    if (rank == 0) r.rank0 = s;
  }
  r.slowest = summarize(std::move(slowest), 1);
  return r;
}

double algbw_gbs(std::size_t bytes, double us) {
  return us > 0.0 ? static_cast<double>(bytes) / (us * 1e3) : 0.0;
}
double bus_factor(int world) {
  return 2.0 * (world - 1) / world;
}

// The group mnist-dp itself would join under this launcher (host/command/train_command.hpp).
std::unique_ptr<ProcessGroup> join(const LaunchInfo& launch, const Options& o) {
  TrainOptions train;
  train.timeout_seconds = o.timeout_seconds;
  return join_process_group(launch, train);
}

int run(ProcessGroup& group, const LaunchInfo& launch, const Options& o) {
  const bool root = group.rank() == 0;
  const int world = group.size();
  const double load_before = load_average();
  const unsigned cpus = std::thread::hardware_concurrency();
  const std::string model = cpu_model();
  if (root) {
    fmt::print("{}: {} processes started by {}; {}\n", kProgram, world, launcher_name(launch.launcher),
               group.description());
    fmt::print("machine: {} ({} CPUs), load {:.2f}{}\n", model.empty() ? "CPU model not named" : model, cpus,
               load_before,
               static_cast<unsigned>(world) > cpus
                   ? fmt::format("; {} processes on {} CPUs: the cores are oversubscribed", world, cpus)
                   : "");
    std::fflush(stdout);
  }

  check_collectives(group, o.broadcast_bytes);
  if (root) {
    fmt::print(
        "checks: all_reduce_sum of {} floats exact on every rank; any() false and true; broadcast of {} "
        "bytes: ok\n",
        kGradFloats, o.broadcast_bytes);
    std::fflush(stdout);
  }

  // The gradient buffer: refilled before each all-reduce (untimed), so that every timed one sums the same
  // small numbers (repeated sums would grow to infinity) and its result can be checked.
  std::vector<float> initial(kGradFloats), values(kGradFloats);
  for (std::size_t i = 0; i < initial.size(); ++i)
    initial[i] = contribution(group.rank(), i);
  std::vector<std::byte> bytes(o.broadcast_bytes, std::byte{0});
  bool flag = false;
  const std::vector<Operation> operations{
      {"all_reduce_sum", kGradBytes, [&] { std::copy(initial.begin(), initial.end(), values.begin()); },
       [&] { group.all_reduce_sum(values); },
       [&] {
         std::string first_bad;
         if (const std::size_t wrong = count_wrong(values, world, first_bad); wrong > 0)
           throw CheckFailed(fmt::format("a timed all_reduce_sum on rank {}: {} elements wrong ({})",
                                         group.rank(), wrong, first_bad));
       }},
      {"any(false)", 1, nullptr, [&] { flag = group.any(false); },
       [&] {
         if (flag)
           throw CheckFailed(fmt::format("a timed any(false) returned true on rank {}", group.rank()));
       }},
      {fmt::format("broadcast {} B", o.broadcast_bytes), o.broadcast_bytes, nullptr,
       [&] { group.broadcast(bytes); }, nullptr},
  };
  std::vector<Result> results;
  for (const Operation& op : operations)
    results.push_back(time_operation(group, op, o));
  const double load_after = load_average();

  if (!root) return 0;
  fmt::print(
      "timing: {} warm-up operations, then {} timings of one operation each, the ranks meeting in an "
      "any(false) before each; a timing is the slowest rank's.\nalgbw = bytes / median; busbw = algbw x "
      "2(n-1)/n (nccl-tests' convention; n = {}).\n\n",
      o.warmup, o.repeats, world);
  fmt::print("{:<18} {:>10}  {:>10} {:>10} {:>10}  {:>10}  {:>10} {:>10}\n", "operation", "bytes",
             "median us", "p10 us", "p90 us", "rank 0 us", "algbw GB/s", "busbw GB/s");
  for (const Result& r : results) {
    const bool reduce = r.name == "all_reduce_sum";
    const double alg = algbw_gbs(r.bytes, r.slowest.median);
    fmt::print("{:<18} {:>10}  {:>10.1f} {:>10.1f} {:>10.1f}  {:>10.1f}  {:>10} {:>10}\n", r.name, r.bytes,
               r.slowest.median, r.slowest.p10, r.slowest.p90, r.rank0.median,
               reduce ? fmt::format("{:.3f}", alg) : "",
               reduce ? fmt::format("{:.3f}", alg * bus_factor(world)) : "");
  }
  fmt::print("\nload average: {:.2f} before, {:.2f} after\n", load_before, load_after);

  if (!o.json_path.empty()) {
    nlohmann::json ops = nlohmann::json::array();
    for (const Result& r : results) {
      nlohmann::json j{{"operation", r.name},
                       {"bytes", r.bytes},
                       {"slowest_rank", to_json(r.slowest, false)},
                       {"rank0", to_json(r.rank0, false)},
                       {"median_us_per_rank", r.rank_medians}};
      if (r.name == "all_reduce_sum") {
        j["floats"] = kGradFloats;
        j["algbw_gbs"] = algbw_gbs(r.bytes, r.slowest.median);
        j["busbw_gbs"] = algbw_gbs(r.bytes, r.slowest.median) * bus_factor(world);
      }
      ops.push_back(j);
    }
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    const nlohmann::json out{
        {"program", kProgram},
        {"date", utc_now()},
        {"host", host},
        {"cpu_model", model},
        {"cpus", cpus},
        {"oversubscribed", static_cast<unsigned>(world) > cpus},
        {"load_average_1min_before", load_before},
        {"load_average_1min_after", load_after},
        {"launcher", launcher_name(launch.launcher)},
        {"world_size", world},
        {"process_group", group.description()},
        {"options", {{"warmup", o.warmup}, {"repeats", o.repeats}, {"broadcast_bytes", o.broadcast_bytes}}},
        {"checks", "ok"},
        {"operations", ops}};
    write_json(o.json_path, out);
    fmt::print("wrote {}\n", o.json_path);
  }
  return 0;
}

int main_checked(int argc, char** argv) {
  Options o;
  CLI::App app{
      "mnist-dp-process-group-bench: the host-side collectives of a multi-process mnist-dp run (the gradient "
      "all-reduce, the stop vote, a broadcast), checked then timed. Start it under mpirun, or with "
      "torchrun's "
      "variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) on every process."};
  app.add_option("--warmup", o.warmup, "Untimed operations before the timings, per operation")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  app.add_option("--repeats", o.repeats, "Timings per operation (one operation each)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--json", o.json_path, "Rank 0 also writes every figure and the machine to this JSON file");
  app.add_option("--broadcast-bytes", o.broadcast_bytes, "Size of the timed broadcast")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  app.add_option("--launcher", o.launcher,
                 "auto (what mpirun, torchrun or srun set), mpi, or env (torchrun's or Slurm's variables)")
      ->check(CLI::IsMember({"auto", "mpi", "env"}))
      ->capture_default_str();
  app.add_option("--timeout", o.timeout_seconds,
                 "TCP group: seconds a rank waits for the others (to join, and in each collective)")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  const LaunchInfo launch = [&] {
    try {
      return detect_launch(o.launcher, process_environment());
    } catch (const LaunchError& e) {
      throw UsageError(e.what());
    }
  }();
  if (!launch.multi_process())
    throw UsageError(
        "this benchmark times collectives between processes and needs at least 2 of them: start it with "
        "mpirun -np N, or as N processes with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set "
        "(as torchrun does)");
  // Every failure from here on is reported with this rank's number, and passed on to the other ranks so that
  // none of them waits for a collective that will not come.
  const std::string prefix =
      launch.rank == 0 ? fmt::format("{}: ", kProgram) : fmt::format("[rank {}] {}: ", launch.rank, kProgram);
  std::unique_ptr<ProcessGroup> group;
  try {
    group = join(launch, o);
    return run(*group, launch, o);
  } catch (const std::exception& e) {
    const bool usage = dynamic_cast<const UsageError*>(&e) != nullptr;
    const std::string text = fmt::format("{}{}", usage ? "" : "error: ", e.what());
    std::fprintf(stderr, "%s%s\n", prefix.c_str(), text.c_str());
    std::fflush(stderr);
    if (group) {
      const auto* remote = dynamic_cast<const RemoteRankError*>(&e);
      group->abort(remote ? remote->rank() : launch.rank, remote ? e.what() : text);
    }
    return usage ? 2 : 1;
  }
}

}  // namespace
}  // namespace mnistdp::bench

int main(int argc, char** argv) {
  try {
    return mnistdp::bench::main_checked(argc, argv);
  } catch (const mnistdp::bench::UsageError& e) {
    std::fprintf(stderr, "mnist-dp-process-group-bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mnist-dp-process-group-bench: error: %s\n", e.what());
    return 1;
  }
}
