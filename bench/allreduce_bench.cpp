// mnist-dp-allreduce-bench: the NCCL all-reduce (sum, float) that averages mnist-dp's gradients, timed in
// nccl-tests' manner, in one process over the visible GPUs (ncclCommInitAll), at world size 1 and at every
// power of two up to the number of GPUs.
//
//   mnist-dp-allreduce-bench [--quick] [--json FILE] [--gpus N] [--min-bytes B] [--max-bytes B]
//                            [--repeats N] [--check-only]
//
// Sizes: 4 KB to 256 MB, doubling, plus the gradient buffer's (ParamLayout::kGradCount floats, 0.78 MiB).
// Time per operation: CUDA events on every rank's stream around `iters` back-to-back all-reduces (the slowest
// rank's time), median over the repeats. algbw = bytes / time; busbw = algbw * 2 (n - 1) / n, the bandwidth
// each link carries in a ring, comparable across world sizes (nccl-tests' PERFORMANCE.md). Each size is
// checked (every element of every rank's result) before it is timed. --check-only checks every size the same
// way, launches it once more in each mode between the events, and reports no time: a rehearsal of a GPU run,
// which emulated devices may take.
//
// Exit status: 0 when every check passed, 1 when one failed or a call failed, 77 when no GPU is usable.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_common.hpp"
#include "bench/bench_device.hpp"
#include "host/model/params.hpp"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/memory.hpp"
#ifdef MNISTDP_BENCH_HAVE_REDUCE
#include "kernels/cuda/ops/replica_sum.hpp"
#endif

namespace mnistdp::bench {
namespace {

constexpr const char* kProgram = "mnist-dp-allreduce-bench";
constexpr std::size_t kGradBytes = ParamLayout::kGradCount * sizeof(float);

struct Options {
  bool quick = false;
  std::string json_path;
  int gpus = 0;  // 0: all
  std::size_t min_bytes = 4 << 10;
  std::size_t max_bytes = std::size_t{256} << 20;
  int repeats = 0;
  bool check_only = false;  // check and launch everything, time nothing
};

// The ranks of one communicator: rank r on device r, each with its stream, buffers and events.
class Ranks {
 public:
  Ranks(int n, std::size_t max_count) : comms_(static_cast<std::size_t>(n)) {
    std::vector<int> devices(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r)
      devices[static_cast<std::size_t>(r)] = r;
    NCCL_CHECK(ncclCommInitAll(comms_.data(), n, devices.data()));
    for (int r = 0; r < n; ++r) {
      CUDA_CHECK(cudaSetDevice(r));
      auto& rank = ranks_.emplace_back();
      rank.stream.emplace();
      rank.send = DeviceBuffer<float>(max_count);
      rank.recv = DeviceBuffer<float>(max_count);
      rank.mismatches = DeviceBuffer<unsigned long long>(1);
      rank.start.emplace();
      rank.stop.emplace();
    }
  }
  ~Ranks() {
    for (ncclComm_t c : comms_)
      if (c) static_cast<void>(ncclCommDestroy(c));
  }
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;

  int size() const { return static_cast<int>(ranks_.size()); }

  // One all-reduce on every rank, as one NCCL group (one thread drives every device). Each call with its
  // rank's device current, as host/cuda/cuda_communicators.cpp makes them (the emulated NCCL insists on it).
  void all_reduce(std::size_t count, bool in_place) {
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < size(); ++r) {
      CUDA_CHECK(cudaSetDevice(r));
      Rank& k = at(r);
      const float* send = in_place ? k.recv.data() : k.send.data();
      NCCL_CHECK(ncclAllReduce(send, k.recv.data(), count, ncclFloat, ncclSum,
                               comms_[static_cast<std::size_t>(r)], k.stream->get()));
    }
    NCCL_CHECK(ncclGroupEnd());
  }

  void synchronize() {
    for (int r = 0; r < size(); ++r) {
      CUDA_CHECK(cudaSetDevice(r));
      at(r).stream->synchronize();
    }
  }

  // Rank r contributes r + 1 everywhere; the sum, n (n + 1) / 2, is exact in float. Returns the number of
  // elements, over every rank, that differ from it.
  unsigned long long check(std::size_t count, bool in_place) {
    for (int r = 0; r < size(); ++r) {
      CUDA_CHECK(cudaSetDevice(r));
      Rank& k = at(r);
      fill_value(in_place ? k.recv.data() : k.send.data(), count, static_cast<float>(r + 1), k.stream->get());
      if (!in_place) fill_value(k.recv.data(), count, -1.0f, k.stream->get());
    }
    all_reduce(count, in_place);
    const float want = static_cast<float>(size() * (size() + 1) / 2);
    unsigned long long bad = 0;
    for (int r = 0; r < size(); ++r) {
      CUDA_CHECK(cudaSetDevice(r));
      Rank& k = at(r);
      count_not_equal(k.recv.data(), count, want, k.mismatches.data(), k.stream->get());
      unsigned long long here = 0;
      CUDA_CHECK(
          cudaMemcpyAsync(&here, k.mismatches.data(), sizeof here, cudaMemcpyDeviceToHost, k.stream->get()));
      k.stream->synchronize();
      bad += here;
    }
    return bad;
  }

  // Microseconds per all-reduce: `iters` back to back, timed by events on every rank's stream; the slowest
  // rank.
  double time(std::size_t count, bool in_place, int iters) {
    for (int r = 0; r < size(); ++r) {
      CUDA_CHECK(cudaSetDevice(r));
      at(r).start->record(at(r).stream->get());
    }
    for (int i = 0; i < iters; ++i)
      all_reduce(count, in_place);
    for (int r = 0; r < size(); ++r) {
      CUDA_CHECK(cudaSetDevice(r));
      at(r).stop->record(at(r).stream->get());
    }
    double slowest = 0.0;
    for (int r = 0; r < size(); ++r) {
      CUDA_CHECK(cudaSetDevice(r));
      at(r).stop->synchronize();
      slowest = std::max(slowest, static_cast<double>(at(r).stop->elapsed_ms_since(*at(r).start)));
    }
    return 1e3 * slowest / iters;
  }

 private:
  struct Rank {
    std::optional<Stream> stream;
    DeviceBuffer<float> send, recv;
    DeviceBuffer<unsigned long long> mismatches;
    std::optional<Event> start, stop;
  };
  Rank& at(int r) { return ranks_[static_cast<std::size_t>(r)]; }

  std::vector<ncclComm_t> comms_;
  std::vector<Rank> ranks_;
};

struct Row {
  int world = 1;
  std::size_t bytes = 0;
  bool gradient = false;  // the gradient buffer's size
  std::string check = "ok";
  Stats out_of_place, in_place;
};

double algbw(std::size_t bytes, double us) {
  return static_cast<double>(bytes) / (us * 1e3);  // GB/s
}
double bus_factor(int world) {
  return 2.0 * (world - 1) / world;
}

// Bandwidth ceilings: a device-to-device copy on device 0 (bytes read + written), and a peer copy 0 -> 1.
struct Ceilings {
  double copy_gbs = 0.0;
  double peer_gbs = 0.0;  // 0 when there is one GPU
  bool peer_access = false;
  Stats empty_stream;
};

// The size of the ceilings' copies in a check-only run (at most --max-bytes): each path launched at a size
// that takes an emulated device moments, the figures thrown away.
constexpr std::size_t kCheckOnlyCopyBytes = std::size_t{1} << 20;

// With check_only, each copy is of copy_bytes (at most kCheckOnlyCopyBytes) and launched as few times as the
// timing allows; the figures are not to be reported.
Ceilings measure_ceilings(int gpus, bool quick, bool check_only, std::size_t copy_bytes) {
  Ceilings c;
  const std::size_t bytes = check_only ? std::min(copy_bytes, kCheckOnlyCopyBytes) : std::size_t{256} << 20;
  const TimingConfig cfg = check_only ? kCheckOnlyTiming : TimingConfig{quick ? 3 : 10, 20.0, 4, 2};
  CUDA_CHECK(cudaSetDevice(0));
  Stream s;
  {
    DeviceBuffer<std::uint8_t> a(bytes), b(bytes);
    CUDA_CHECK(cudaMemsetAsync(a.data(), 1, bytes, s.get()));
    const Stats st = time_stream(
        [&](long) {
          CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, s.get()));
        },
        s.get(), cfg);
    c.copy_gbs = 2.0 * static_cast<double>(bytes) / (st.median * 1e3);
    const TimingConfig launch_cfg =
        check_only ? kCheckOnlyTiming : TimingConfig{quick ? 7 : 25, 5.0, 1000, 10};
    c.empty_stream = time_stream([&](long) { launch_empty(s.get()); }, s.get(), launch_cfg);
  }
  if (gpus > 1) {
    int can = 0;
    CUDA_CHECK(cudaDeviceCanAccessPeer(&can, 0, 1));
    c.peer_access = can != 0;
    if (can) {
      const cudaError_t e = cudaDeviceEnablePeerAccess(1, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CUDA_CHECK(e);
      static_cast<void>(cudaGetLastError());
    }
    DeviceBuffer<std::uint8_t> a(bytes);
    CUDA_CHECK(cudaSetDevice(1));
    DeviceBuffer<std::uint8_t> b(bytes);
    CUDA_CHECK(cudaSetDevice(0));
    const Stats st =
        time_stream([&](long) { CUDA_CHECK(cudaMemcpyPeerAsync(b.data(), 1, a.data(), 0, bytes, s.get())); },
                    s.get(), cfg);
    c.peer_gbs = static_cast<double>(bytes) / (st.median * 1e3);
  }
  return c;
}

std::vector<std::size_t> sizes(const Options& o) {
  std::vector<std::size_t> v;
  for (std::size_t b = o.min_bytes; b <= o.max_bytes; b *= 2)
    v.push_back(b);
  if (kGradBytes >= o.min_bytes && kGradBytes <= o.max_bytes) v.push_back(kGradBytes);
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

void print_row(const Row& r, const Ceilings& c, bool check_only) {
  if (check_only) {
    fmt::print("{:>5} {:>12} {:>12}{}  {}\n", r.world, r.bytes, r.bytes / 4, r.gradient ? "*" : " ",
               r.check == "ok" ? "checked" : r.check);
    std::fflush(stdout);
    return;
  }
  auto cols = [&](const Stats& s) {
    const double alg = algbw(r.bytes, s.median);
    return fmt::format("{:>10.2f} {:>8.2f} {:>8.2f}", s.median, alg, alg * bus_factor(r.world));
  };
  // The fraction of the link: busbw over the peer copy with several GPUs; algbw over the local copy with one.
  double frac = 0.0;
  if (r.check == "ok") {
    const double alg = algbw(r.bytes, r.in_place.median);
    frac = r.world > 1 ? (c.peer_gbs > 0 ? alg * bus_factor(r.world) / c.peer_gbs : 0.0) : alg / c.copy_gbs;
  }
  if (r.check != "ok") {
    fmt::print("{:>5} {:>12} {:>12}{}  {}\n", r.world, r.bytes, r.bytes / 4, r.gradient ? "*" : " ", r.check);
    return;
  }
  fmt::print("{:>5} {:>12} {:>12}{} {} {} {:>7.1f}%  {}\n", r.world, r.bytes, r.bytes / 4,
             r.gradient ? "*" : " ", cols(r.out_of_place), cols(r.in_place), 100.0 * frac, r.check);
  std::fflush(stdout);
}

// Several replicas on one GPU (NCCL refuses two ranks on one device): the project's in-order sum kernel
// (kernels/cuda/ops/replica_sum.hpp), and the whole same-device all-reduce as
// host/cuda/cuda_communicators.cpp does it, the sum into replica 0's buffer then a copy back to every other
// replica's (here all on one stream). Checked, then timed like the rows above. mem GB/s counts the bytes that
// must move: the sum reads R buffers and writes one, each copy reads and writes one. check_only: each size
// checked and launched as few times as the timing allows, and no time reported.
nlohmann::json same_device_section(const std::vector<std::size_t>& all_sizes, int repeats, bool quick,
                                   bool check_only, const Ceilings& ceil, bool& all_ok) {
#ifndef MNISTDP_BENCH_HAVE_REDUCE
  static_cast<void>(all_sizes);
  static_cast<void>(repeats);
  static_cast<void>(quick);
  static_cast<void>(check_only);
  static_cast<void>(ceil);
  static_cast<void>(all_ok);
  const char* why = "skipped: kernels/cuda/ops/replica_sum.hpp is not in this build";
  fmt::print("\nsame-device reduction (several replicas on one GPU): {}\n", why);
  return why;
#else
  if (check_only) {
    fmt::print(
        "\nSame-device all-reduce on GPU 0 (R replicas on one GPU; kernels/cuda/ops/replica_sum.hpp): the "
        "in-order "
        "sum kernel, and sum + (R-1) copies back, checked against the exact sum, then launched "
        "untimed.\n\n");
    fmt::print("{:>8} {:>12} {:>12}   {}\n", "replicas", "bytes", "floats", "check");
  } else {
    fmt::print(
        "\nSame-device all-reduce on GPU 0 (R replicas on one GPU; kernels/cuda/ops/replica_sum.hpp): the "
        "in-order "
        "sum kernel alone, and sum + (R-1) copies back.\nmem GB/s: bytes that must move (sum: (R+1) x bytes; "
        "copies: 2 (R-1) x bytes) / time; %copy: of the device-to-device copy ceiling.\n\n");
    fmt::print("{:>8} {:>12} {:>12}  {:>10} {:>9} {:>6} {:>10} {:>8} {:>9} {:>6}  {}\n", "replicas", "bytes",
               "floats", "sum us", "mem GB/s", "%copy", "all us", "algbw", "mem GB/s", "%copy", "check");
  }
  CUDA_CHECK(cudaSetDevice(0));
  Stream stream;
  const cudaStream_t s = stream.get();
  const std::size_t max_count = all_sizes.back() / 4;
  const TimingConfig cfg = check_only ? kCheckOnlyTiming : TimingConfig{repeats, quick ? 2.0 : 5.0, 1000, 5};
  nlohmann::json rows = nlohmann::json::array();
  const std::vector<int> replica_counts = quick ? std::vector<int>{2, 8} : std::vector<int>{2, 3, 4, 8};
  for (const int replicas : replica_counts) {
    std::vector<DeviceBuffer<float> > buffers;
    std::vector<const float*> table;
    for (int r = 0; r < replicas; ++r) {
      buffers.emplace_back(max_count);
      table.push_back(buffers.back().data());
    }
    DeviceBuffer<const float*> device_table(table.size());
    CUDA_CHECK(
        cudaMemcpyAsync(device_table.data(), table.data(), device_table.bytes(), cudaMemcpyHostToDevice, s));
    DeviceBuffer<unsigned long long> mismatches(1);
    stream.synchronize();
    for (const std::size_t bytes : all_sizes) {
      const std::size_t count = bytes / 4;
      auto sum = [&](long) {
        cuda::sum_in_order(device_table.data(), replicas, buffers[0].data(), count, s);
      };
      auto all_reduce = [&](long i) {
        sum(i);
        for (int r = 1; r < replicas; ++r)
          CUDA_CHECK(cudaMemcpyAsync(buffers[static_cast<std::size_t>(r)].data(), buffers[0].data(), bytes,
                                     cudaMemcpyDeviceToDevice, s));
      };
      std::string check = "ok";
      Stats t_sum, t_all;
      try {
        for (int r = 0; r < replicas; ++r)
          fill_value(buffers[static_cast<std::size_t>(r)].data(), count, static_cast<float>(r + 1), s);
        all_reduce(0);
        unsigned long long bad = 0;
        for (int r = 0; r < replicas; ++r) {
          count_not_equal(buffers[static_cast<std::size_t>(r)].data(), count,
                          static_cast<float>(replicas * (replicas + 1) / 2), mismatches.data(), s);
          unsigned long long here = 0;
          CUDA_CHECK(cudaMemcpyAsync(&here, mismatches.data(), sizeof here, cudaMemcpyDeviceToHost, s));
          stream.synchronize();
          bad += here;
        }
        if (bad) check = fmt::format("FAIL: {} elements differ from the exact sum", bad);
        if (check == "ok") {
          t_sum = time_stream(sum, s, cfg);
          t_all = time_stream(all_reduce, s, cfg);
        }
      } catch (const std::exception& e) {
        check = std::string("ERROR: ") + e.what();
      }
      all_ok = all_ok && check == "ok";
      const double b = static_cast<double>(bytes);
      const double sum_bytes = (replicas + 1) * b, all_bytes = sum_bytes + 2.0 * (replicas - 1) * b;
      nlohmann::json row{{"replicas", replicas},
                         {"bytes", bytes},
                         {"gradient_buffer", bytes == kGradBytes},
                         {"check", check}};
      if (check_only) {
        fmt::print("{:>8} {:>12} {:>12}{}  {}\n", replicas, bytes, count, bytes == kGradBytes ? "*" : " ",
                   check == "ok" ? "checked" : check);
      } else if (check == "ok") {
        const double sum_gbs = sum_bytes / (t_sum.median * 1e3), all_gbs = all_bytes / (t_all.median * 1e3);
        fmt::print(
            "{:>8} {:>12} {:>12}{} {:>10.2f} {:>9.1f} {:>5.1f}% {:>10.2f} {:>8.2f} {:>9.1f} {:>5.1f}%  {}\n",
            replicas, bytes, count, bytes == kGradBytes ? "*" : " ", t_sum.median, sum_gbs,
            100.0 * sum_gbs / ceil.copy_gbs, t_all.median, algbw(bytes, t_all.median), all_gbs,
            100.0 * all_gbs / ceil.copy_gbs, check);
        row["sum"] = to_json(t_sum);
        row["sum"]["mem_gbs"] = sum_gbs;
        row["all_reduce"] = to_json(t_all);
        row["all_reduce"]["algbw_gbs"] = algbw(bytes, t_all.median);
        row["all_reduce"]["mem_gbs"] = all_gbs;
      } else {
        fmt::print("{:>8} {:>12} {:>12}{}  {}\n", replicas, bytes, count, bytes == kGradBytes ? "*" : " ",
                   check);
      }
      std::fflush(stdout);
      rows.push_back(row);
    }
  }
  return rows;
#endif
}

int run(int argc, char** argv) {
  Options o;
  CLI::App app{
      "mnist-dp-allreduce-bench: NCCL all-reduce (sum, float) over the visible GPUs, in nccl-tests' "
      "manner, from 4 KB to 256 MB and at the size of mnist-dp's gradient buffer."};
  app.add_flag("--quick", o.quick, "Fewer repeats and iterations");
  app.add_option("--json", o.json_path,
                 "Also write every row, the ceilings and the machine to this JSON file");
  app.add_option("--gpus", o.gpus, "Use the first N GPUs (default: all)")->check(CLI::PositiveNumber);
  app.add_option("--min-bytes", o.min_bytes, "Smallest size")
      ->check(CLI::Range(4, 1 << 30))
      ->capture_default_str();
  app.add_option("--max-bytes", o.max_bytes, "Largest size")
      ->check(CLI::Range(4, 1 << 30))
      ->capture_default_str();
  app.add_option("--repeats", o.repeats, "Timings per size (default 10, 3 with --quick)")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--check-only", o.check_only,
               "Time nothing: check every size's sum as a timed run does (a failed check still exits 1), "
               "launch it once more in each mode, and print no time (the JSON says \"check_only\": true and "
               "has no times). A rehearsal of a GPU run: runs on emulated devices too (--max-bytes keeps it "
               "small); --repeats is ignored");
  CLI11_PARSE(app, argc, argv);
  if (o.min_bytes % 4 || o.max_bytes % 4)
    throw std::invalid_argument("--min-bytes and --max-bytes: whole floats");
  if (o.min_bytes > o.max_bytes) throw std::invalid_argument("--min-bytes is larger than --max-bytes");

  std::string why;
  const int available = usable_devices(why, o.check_only);
  if (available == 0) return report_no_gpu(kProgram, why, "");
  const int gpus = o.gpus ? o.gpus : available;
  if (gpus > available)
    throw std::invalid_argument(
        fmt::format("--gpus {}: this machine has {} CUDA device(s)", gpus, available));
  const int repeats = o.repeats ? o.repeats : (o.quick ? 3 : 10);

  int nccl_version = 0;
  NCCL_CHECK(ncclGetVersion(&nccl_version));
  nlohmann::json devices = nlohmann::json::array();
  for (int d = 0; d < gpus; ++d)
    devices.push_back(device_json(d));
  if (o.check_only)
    fmt::print("{} --check-only: {} GPU(s): {}; NCCL {}: {}.\n", kProgram, gpus,
               devices[0]["name"].get<std::string>(), nccl_version, check_only_note());
  else
    fmt::print("{}: {} GPU(s): {}; NCCL {}; host load {:.2f}\n", kProgram, gpus,
               devices[0]["name"].get<std::string>(), nccl_version, load_average());
  const Ceilings ceil = measure_ceilings(gpus, o.quick, o.check_only, o.max_bytes);
  if (o.check_only) {
    fmt::print(
        "Ceilings: the device-to-device copy{}, the empty kernel: launched untimed, {} bytes.\n"
        "Each size: an all-reduce out of place and one in place, every element of every rank's result "
        "checked against the exact sum; then each launched once more between the events, untimed.\n"
        "* = the gradient buffer ({} floats).\n\n",
        gpus > 1 ? fmt::format(", the peer copy 0 -> 1 (peer access {})", ceil.peer_access ? "on" : "off")
                 : "",
        std::min(o.max_bytes, kCheckOnlyCopyBytes), ParamLayout::kGradCount);
    fmt::print("{:>5} {:>12} {:>12}   {}\n", "ranks", "bytes", "floats", "check");
  } else {
    fmt::print("Ceilings: device-to-device copy {:.1f} GB/s (read + write); ", ceil.copy_gbs);
    if (gpus > 1)
      fmt::print("peer copy 0 -> 1 {:.1f} GB/s (peer access {}); ", ceil.peer_gbs,
                 ceil.peer_access ? "on" : "off");
    fmt::print("empty kernel {:.2f} us per launch\n", ceil.empty_stream.median);
    fmt::print(
        "Time per all-reduce: median over {} timings, each of N back-to-back operations (N: a few ms in all; "
        "the slowest rank's events).\nalgbw = bytes / time; busbw = algbw x 2(n-1)/n. %link: in-place busbw "
        "/ peer copy (n > 1), or in-place algbw / local copy (n = 1).\n* = the gradient buffer ({} "
        "floats).\n\n",
        repeats, ParamLayout::kGradCount);
    fmt::print("{:>5} {:>12} {:>12}  {:>28} {:>28} {:>8}\n", "", "", "", "out-of-place", "in-place", "");
    fmt::print("{:>5} {:>12} {:>12}  {:>10} {:>8} {:>8} {:>10} {:>8} {:>8} {:>8}  {}\n", "ranks", "bytes",
               "floats", "us", "algbw", "busbw", "us", "algbw", "busbw", "%link", "check");
  }

  std::vector<int> worlds;
  for (int w = 1; w < gpus; w *= 2)
    worlds.push_back(w);
  worlds.push_back(gpus);
  const std::vector<std::size_t> all_sizes = sizes(o);
  std::vector<Row> rows;
  bool all_ok = true;
  for (const int world : worlds) {
    Ranks ranks(world, all_sizes.back() / 4);
    for (const std::size_t bytes : all_sizes) {
      Row r;
      r.world = world;
      r.bytes = bytes;
      r.gradient = bytes == kGradBytes;
      const std::size_t count = bytes / 4;
      try {
        const unsigned long long bad = ranks.check(count, false) + ranks.check(count, true);
        if (bad) r.check = fmt::format("FAIL: {} elements differ from the exact sum", bad);
        if (r.check == "ok" && o.check_only) {
          // The timing's path, events on every rank around one operation, with nothing kept.
          for (const bool in_place : {false, true})
            static_cast<void>(ranks.time(count, in_place, 1));
        } else if (r.check == "ok") {
          for (const bool in_place : {false, true}) {
            // Calibrate: enough back-to-back operations for a timing of a few milliseconds (at least 5).
            ranks.time(count, in_place, o.quick ? 2 : 5);  // warm-up
            const double est = ranks.time(count, in_place, 5);
            const int iters =
                std::clamp(static_cast<int>((o.quick ? 2e3 : 5e3) / std::max(est, 1.0)), 5, 1000);
            std::vector<double> us;
            for (int i = 0; i < repeats; ++i)
              us.push_back(ranks.time(count, in_place, iters));
            (in_place ? r.in_place : r.out_of_place) = summarize(std::move(us), iters);
          }
        }
      } catch (const std::exception& e) {
        r.check = std::string("ERROR: ") + e.what();
      }
      all_ok = all_ok && r.check == "ok";
      print_row(r, ceil, o.check_only);
      rows.push_back(r);
    }
  }
  nlohmann::json same_device = same_device_section(all_sizes, repeats, o.quick, o.check_only, ceil, all_ok);

  if (!o.json_path.empty()) {
    nlohmann::json j_rows = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json j{{"ranks", r.world},
                       {"bytes", r.bytes},
                       {"floats", r.bytes / 4},
                       {"gradient_buffer", r.gradient},
                       {"check", r.check}};
      auto mode = [&](const Stats& s) {
        nlohmann::json m = to_json(s);
        m["algbw_gbs"] = algbw(r.bytes, s.median);
        m["busbw_gbs"] = algbw(r.bytes, s.median) * bus_factor(r.world);
        return m;
      };
      if (r.check == "ok" && !o.check_only) {
        j["out_of_place"] = mode(r.out_of_place);
        j["in_place"] = mode(r.in_place);
      }
      j_rows.push_back(j);
    }
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    if (o.check_only)
      write_json(o.json_path, {{"program", kProgram},
                               {"check_only", true},
                               {"emulated", devices_emulated()},
                               {"date", utc_now()},
                               {"host", host},
                               {"nccl_version", nccl_version},
                               {"devices", devices},
                               {"options", {{"quick", o.quick}}},
                               {"same_device_reduction", same_device},
                               {"rows", j_rows}});
    else
      write_json(o.json_path, {{"program", kProgram},
                               {"check_only", false},
                               {"date", utc_now()},
                               {"host", host},
                               {"load_average_1min", load_average()},
                               {"nccl_version", nccl_version},
                               {"devices", devices},
                               {"options", {{"quick", o.quick}, {"repeats", repeats}}},
                               {"ceilings",
                                {{"copy_gbs_read_plus_write", ceil.copy_gbs},
                                 {"peer_copy_gbs", ceil.peer_gbs},
                                 {"peer_access", ceil.peer_access},
                                 {"empty_kernel", to_json(ceil.empty_stream)}}},
                               {"same_device_reduction", same_device},
                               {"rows", j_rows}});
    fmt::print("wrote {}\n", o.json_path);
  }
  if (!all_ok) {
    std::fprintf(stderr, "%s: some checks or calls failed: see the check column\n", kProgram);
    return 1;
  }
  if (o.check_only)
    fmt::print("\nevery size checked, nothing timed{}\n", devices_emulated() ? " (emulated devices)" : "");
  return 0;
}

}  // namespace
}  // namespace mnistdp::bench

int main(int argc, char** argv) {
  try {
    return mnistdp::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mnist-dp-allreduce-bench: %s\n", e.what());
    return 1;
  }
}
