#include "bench/epoch_bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_common.hpp"
#include "host/cuda/cuda_communicators.hpp"
#include "host/cuda/cuda_replica.hpp"
#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "host/training/trainer.hpp"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/memory.hpp"

namespace mnistdp::bench {
namespace {

constexpr const char* kProgram = "mnist-dp-bench --epoch";
// Untimed epochs first. With graphs, the full batch's graph is captured at the second step of epoch 0, but
// the short last batch's only at the end of epoch 1 (its first sight is at the end of epoch 0): two epochs
// keep every capture out of the timed ones.
constexpr int kWarmUpEpochs = 2;
// The trainer makes each epoch's order during the epoch before, while the device finishes that epoch's
// steps. One untimed epoch after the timed ones makes every timed epoch contain the making of one order.
constexpr int kCoolDownEpochs = 1;
using L = ParamLayout;

// Random pixels and labels: the step's time does not depend on the values (no kernel branches on them but
// the ReLU's, which costs the same either way), and a made-up set needs no files.
Dataset random_split(int count, std::mt19937& rng) {
  Dataset d;
  d.count = count;
  d.images.resize(static_cast<std::size_t>(count) * L::kInput);
  d.labels.resize(static_cast<std::size_t>(count));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> label(0, L::kClasses - 1);
  for (auto& p : d.images)
    p = static_cast<std::uint8_t>(byte(rng));
  for (auto& y : d.labels)
    y = static_cast<std::uint8_t>(label(rng));
  return d;
}

class EpochTimes final : public TrainListener {
 public:
  void on_epoch_end(const EpochReport& r) override { reports.push_back(r); }
  std::vector<EpochReport> reports;
};

struct Variant {
  const char* name;
  CudaStepOptions step;               // the GEMM and TF32 are the run's, set in run_round
  std::vector<double> us_per_step{};  // one per timed epoch, every round
  std::vector<double> epoch_ms{};
  int steps = 0;
  CudaReplica::GraphCounts counts{};  // of the last round
  long persistent_launches = 0;       // of the last round
  std::vector<float> params{};        // after the last round
};

// One round of one variant: a fresh replica and communicator, 1 + repeats epochs from the same start.
void run_round(Variant& v, const DataSplits& data, const EpochBenchOptions& o, GemmImpl gemm) {
  std::vector<std::unique_ptr<Replica>> replicas;
  CudaStepOptions step = v.step;
  step.gemm = gemm;
  step.tf32 = o.tf32;
  step.alone = true;  // the one replica of the run, as the command line makes it
  replicas.push_back(make_cuda_replica(data, o.device, step));
  std::vector<float> init(L::kCount);
  init_parameters(init, 0);
  replicas[0]->load_parameters(init);
  std::vector<Replica*> raw{replicas[0].get()};
  auto communicator = make_nccl_communicator(raw);

  TrainConfig config;  // the reference program's: batch 64, SGD(lr = 0.01)
  config.epochs = kWarmUpEpochs + o.repeats + kCoolDownEpochs;
  config.log_interval = 0;  // no loss lines: the host never waits for the device within an epoch
  config.evaluate = false;
  Trainer trainer(std::move(replicas), std::move(communicator), data.train.count, config);
  EpochTimes times;
  trainer.run(times);
  if (times.reports.size() != static_cast<std::size_t>(config.epochs))
    throw std::logic_error(
        fmt::format("{}: {} epochs ran of {}", kProgram, times.reports.size(), config.epochs));
  for (std::size_t e = kWarmUpEpochs; e < kWarmUpEpochs + static_cast<std::size_t>(o.repeats); ++e) {
    const EpochReport& r = times.reports[e];
    v.steps = r.steps;
    v.epoch_ms.push_back(1e3 * r.seconds);
    v.us_per_step.push_back(1e6 * r.seconds / r.steps);
  }
  auto& cuda = dynamic_cast<CudaReplica&>(*trainer.replicas()[0]);
  v.counts = cuda.graph_counts();
  v.persistent_launches = cuda.persistent_launches();
  v.params.assign(L::kCount, 0.0f);
  cuda.store_parameters(v.params);
}

// The start of an epoch, the two ways a replica has been given its order: the host's shuffle and its copy
// through pinned memory (set_epoch_order, the trainer's way before a replica made its own order), and the
// replica's own sort on the device (make_epoch_order). Host time until the call returns; and the time until
// the order is in place on the device, between events recorded on the replica's stream, idle before, around
// the call.
struct EpochStart {
  const char* way;
  std::vector<double> host_us{};
  std::vector<double> ready_us{};
};

std::vector<EpochStart> time_epoch_start(const DataSplits& data, int device, int repeats) {
  using Clock = std::chrono::steady_clock;
  CudaReplica replica(data, device, CudaStepOptions{});
  std::vector<EpochStart> ways = {{"host shuffle + copy"}, {"device sort"}};
  std::vector<std::int32_t> order(static_cast<std::size_t>(data.train.count));
  Event start, end;
  for (int r = -1; r < repeats; ++r) {  // r = -1: untimed, the first of each way
    for (std::size_t w = 0; w < ways.size(); ++w) {
      CUDA_CHECK(cudaStreamSynchronize(replica.stream()));
      const auto t0 = Clock::now();
      start.record(replica.stream());
      if (w == 0) {
        epoch_order(order, 1, r + 1);
        replica.set_epoch_order(order);
      } else {
        replica.make_epoch_order(1, r + 1);
      }
      end.record(replica.stream());
      const double host_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      end.synchronize();
      if (r < 0) continue;
      ways[w].host_us.push_back(host_us);
      ways[w].ready_us.push_back(1e3 * static_cast<double>(end.elapsed_ms_since(start)));
    }
  }
  return ways;
}

// The end of a check-only run: each variant's steps, graph and persistent launches and its check, the
// epoch's start run once each way, and the JSON, with no time anywhere. Returns the exit status.
// A variant's row of the JSON, without its figures: what it ran, and how its steps were launched.
nlohmann::json variant_json(const Variant& v) {
  return {{"variant", v.name},
          {"cuda_graphs", v.step.cuda_graphs},
          {"fused_head", v.step.fused_head},
          {"fused_step", v.step.fused_step},
          {"programmatic_launch", v.step.programmatic_launch},
          {"steps_per_graph", v.step.steps_per_graph},
          {"persistent", v.step.persistent},
          {"persistent_launches", v.persistent_launches},
          {"multi_step_launches", v.counts.multi_step},
          {"steps_per_epoch", v.steps},
          {"graphs_captured", v.counts.captured},
          {"graphs_replayed", v.counts.replayed},
          {"plain_steps_with_graphs_on", v.counts.plain}};
}

int report_check_only(const std::vector<Variant>& variants, const DataSplits& data,
                      const EpochBenchOptions& o, const nlohmann::json& dev, bool same, bool cublas) {
  fmt::print(
      "graphs: graph launches captured/replayed/plain steps with graphs on (launches of several steps); "
      "persistent: launches of the persistent kernel.\n");
  fmt::print("{:<18} {:>6} {:>7} {:>20} {:>11}  {}\n", "variant", "steps", "epochs", "graphs", "persistent",
             "check");
  nlohmann::json rows = nlohmann::json::array();
  const int epochs = kWarmUpEpochs + o.repeats + kCoolDownEpochs;
  for (const Variant& v : variants) {
    const bool equal = v.params == variants[0].params;
    // cuBLAS may choose another algorithm while a stream is captured: a difference is reported, not a
    // failure.
    const std::string check = equal    ? "checked"
                              : cublas ? fmt::format("differs from {} (cuBLAS: allowed)", variants[0].name)
                                       : fmt::format("FAIL: parameters differ from {}", variants[0].name);
    fmt::print("{:<18} {:>6} {:>7} {:>20} {:>11}  {}\n", v.name, v.steps, epochs,
               fmt::format("{}/{}/{} ({})", v.counts.captured, v.counts.replayed, v.counts.plain,
                           v.counts.multi_step),
               v.persistent_launches, check);
    nlohmann::json row = variant_json(v);
    row["epochs"] = epochs;
    row["same_parameters_as_first"] = equal;
    rows.push_back(row);
  }
  fmt::print("\nfinal parameters of the variants: {}\n",
             same ? "bit-identical" : "DIFFERENT (a fast path does not compute the plain step)");
  // Both ways of starting an epoch, once each (their untimed first run), for the paths they take.
  const std::vector<EpochStart> starts = time_epoch_start(data, o.device, 0);
  nlohmann::json start_rows = nlohmann::json::array();
  for (const EpochStart& e : starts)
    start_rows.push_back({{"way", e.way}, {"ran", true}});
  fmt::print("the start of an epoch, its order of {} rows: {} and {} each ran once, untimed\n", o.train_rows,
             starts[0].way, starts[1].way);
  if (!o.json_path.empty()) {
    write_json(o.json_path, {{"program", kProgram},
                             {"check_only", true},
                             {"emulated", devices_emulated()},
                             {"date", utc_now()},
                             {"device", dev},
                             {"gemm", o.gemm},
                             {"tf32", o.tf32},
                             {"train_rows", o.train_rows},
                             {"max_steps_per_epoch", o.max_steps > 0 ? nlohmann::json(o.max_steps) : nullptr},
                             {"same_parameters", same},
                             {"variants", rows},
                             {"epoch_start", start_rows}});
    fmt::print("wrote {}\n", o.json_path);
  }
  if (!same && !cublas) {
    std::fprintf(stderr, "%s: the variants' parameters differ: see the check column\n", kProgram);
    return 1;
  }
  fmt::print("\n{} variants checked, nothing timed{}\n", variants.size(),
             devices_emulated() ? " (emulated devices)" : "");
  return 0;
}

}  // namespace

int run_epoch_bench(const EpochBenchOptions& requested) {
  // The options first: a bad combination is refused with or without a GPU.
  const GemmImpl gemm = parse_gemm_impl(requested.gemm);
  if (requested.tf32 && gemm != GemmImpl::cublas)
    throw std::invalid_argument(fmt::format("{}: --epoch-tf32 needs --epoch-gemm cublas", kProgram));
  EpochBenchOptions o = requested;
  if (o.check_only) {
    // Nothing is timed: one epoch where a timed run has its timed ones (the warm-up and cool-down epochs
    // stay, so that every capture, replay and order of a timed run is taken), one round.
    o.repeats = 1;
    o.rounds = 1;
  }
  const int batch = TrainConfig{}.batch_size;
  if (o.max_steps > 0)
    o.train_rows = static_cast<int>(std::min<long>(o.train_rows, static_cast<long>(o.max_steps) * batch));
  const int steps_per_epoch = (o.train_rows + batch - 1) / batch;
  std::string why;
  const int devices = usable_devices(why, o.check_only);
  if (devices == 0) return report_no_gpu(kProgram, why, "");
  if (o.device >= devices)
    throw std::invalid_argument(
        fmt::format("--device {}: this machine has {} CUDA device(s)", o.device, devices));

  std::mt19937 rng(1);
  DataSplits data;
  data.train = random_split(o.train_rows, rng);
  data.test = random_split(16, rng);
  data.name = "random";

  const nlohmann::json dev = device_json(o.device);
  const std::string gemm_name = o.tf32 ? o.gemm + " (TF32)" : o.gemm;
  if (o.check_only) {
    fmt::print(
        "{} --check-only on {} ({} SMs), gemm {}: {} random training rows ({} steps an epoch), batch {}, one "
        "replica, NCCL world size 1: {}.\n"
        "Each variant: {} epochs in one round ({} warm-up, 1 in place of the timed ones, {} more); the "
        "check: "
        "every variant ends with the first one's parameters, to the bit (cuBLAS aside).\n",
        kProgram, dev["name"].get<std::string>(), dev["sm_count"].get<int>(), gemm_name, o.train_rows,
        steps_per_epoch, batch, check_only_note(), kWarmUpEpochs + 1 + kCoolDownEpochs, kWarmUpEpochs,
        kCoolDownEpochs);
    if (devices_emulated() && o.max_steps == 0)
      fmt::print("(--epoch-steps 4 keeps a run on emulated devices to seconds a variant.)\n");
    fmt::print("\n");
  } else {
    fmt::print(
        "{} on {} ({} SMs), gemm {}: {} random training rows ({} steps an epoch), batch {}, one replica, "
        "NCCL world size 1; host load {:.2f}\n"
        "An epoch: every step, and the sort of the next epoch's order on the device, queued behind them, "
        "with no host wait inside; {} timed epochs after {} warm-up epochs and before {} more, per "
        "variant and round, {} rounds alternating the variants.\n\n",
        kProgram, dev["name"].get<std::string>(), dev["sm_count"].get<int>(), gemm_name, o.train_rows,
        steps_per_epoch, batch, load_average(), o.repeats, kWarmUpEpochs, kCoolDownEpochs, o.rounds);
  }

  // Each variant's step options, in kEpochVariants' order: graphs, fused head, fused step, programmatic
  // launch, steps a graph (or a persistent launch), persistent kernel.
  auto options = [](bool graphs, bool head, bool fused, bool programmatic, int per_graph,
                    bool persistent = false) {
    CudaStepOptions step;
    step.cuda_graphs = graphs;
    step.fused_head = head;
    step.fused_step = fused;
    step.programmatic_launch = programmatic;
    step.steps_per_graph = per_graph;
    step.persistent = persistent;
    return step;
  };
  const std::vector<Variant> all = {{kEpochVariants[0], options(false, false, false, false, 1)},
                                    {kEpochVariants[1], options(true, false, false, false, 1)},
                                    {kEpochVariants[2], options(false, true, false, false, 1)},
                                    {kEpochVariants[3], options(true, true, false, false, 1)},
                                    {kEpochVariants[4], options(true, true, true, false, 1)},
                                    {kEpochVariants[5], options(true, true, true, true, 1)},
                                    {kEpochVariants[6], options(true, true, true, true, 64)},
                                    {kEpochVariants[7], options(true, true, true, false, 1, true)},
                                    {kEpochVariants[8], options(true, true, true, false, 64, true)}};
  std::vector<Variant> variants;
  for (const Variant& v : all) {
    if (!o.variants.empty() && std::find(o.variants.begin(), o.variants.end(), v.name) == o.variants.end())
      continue;
    if (v.step.programmatic_launch && !supports_programmatic_launch(o.device)) {
      fmt::print("{}: skipped, the device is older than compute capability 9.0\n", v.name);
      continue;
    }
    if (v.step.persistent && !supports_persistent_step(o.device)) {
      fmt::print("{}: skipped, the device takes no cooperative launch here\n", v.name);
      continue;
    }
    variants.push_back(v);
  }
  if (variants.empty()) throw std::invalid_argument(fmt::format("{}: no variant left to time", kProgram));
  for (int round = 0; round < o.rounds; ++round)
    for (Variant& v : variants)
      run_round(v, data, o, gemm);

  // Same start, same steps, kernels that sum in the same orders: the same parameters, to the bit (cuBLAS:
  // see the tests).
  const bool same = std::all_of(variants.begin(), variants.end(),
                                [&](const Variant& v) { return v.params == variants[0].params; });
  if (o.check_only) return report_check_only(variants, data, o, dev, same, gemm == GemmImpl::cublas);
  // "x plain": against the first variant timed (plain, unless --epoch-variants leaves it out).
  const Stats plain = summarize(variants[0].us_per_step, variants[0].steps);
  fmt::print("{:<18} {:>6} {:>12} {:>10} {:>10} {:>10} {:>9}  {}\n", "variant", "steps", "ms/epoch",
             "us/step", "p10", "p90", "x plain",
             "graph launches captured/replayed/plain (of several steps); persistent launches");
  nlohmann::json rows = nlohmann::json::array();
  for (const Variant& v : variants) {
    const Stats us = summarize(v.us_per_step, v.steps);
    const Stats ms = summarize(v.epoch_ms, v.steps);
    fmt::print("{:<18} {:>6} {:>12.3f} {:>10.2f} {:>10.2f} {:>10.2f} {:>9.2f}  {}/{}/{} ({}); {}\n", v.name,
               v.steps, ms.median, us.median, us.p10, us.p90, plain.median / us.median, v.counts.captured,
               v.counts.replayed, v.counts.plain, v.counts.multi_step, v.persistent_launches);
    nlohmann::json row = variant_json(v);
    row["epoch_ms"] = {{"median_ms", ms.median}, {"p10_ms", ms.p10}, {"p90_ms", ms.p90}};
    row["step_us"] = to_json(us);
    rows.push_back(row);
  }
  fmt::print("\nfinal parameters of the variants: {}\n",
             same ? "bit-identical" : "DIFFERENT (a fast path does not compute the plain step)");

  const std::vector<EpochStart> starts = time_epoch_start(data, o.device, o.repeats);
  fmt::print("\nthe start of an epoch: its order of {} rows, median of {} (p10, p90)\n", o.train_rows,
             o.repeats);
  nlohmann::json start_rows = nlohmann::json::array();
  for (const EpochStart& e : starts) {
    const Stats host = summarize(e.host_us, 1);
    const Stats ready = summarize(e.ready_us, 1);
    fmt::print(
        "{:<20} host {:>9.1f} us ({:.1f}, {:.1f}), in place on the device after {:>9.1f} us ({:.1f}, "
        "{:.1f})\n",
        e.way, host.median, host.p10, host.p90, ready.median, ready.p10, ready.p90);
    start_rows.push_back({{"way", e.way}, {"host_us", to_json(host)}, {"in_place_us", to_json(ready)}});
  }
  if (!o.json_path.empty()) {
    write_json(o.json_path, {{"program", kProgram},
                             {"date", utc_now()},
                             {"device", dev},
                             {"gemm", o.gemm},
                             {"tf32", o.tf32},
                             {"check_only", false},
                             {"train_rows", o.train_rows},
                             {"max_steps_per_epoch", o.max_steps > 0 ? nlohmann::json(o.max_steps) : nullptr},
                             {"repeats", o.repeats},
                             {"rounds", o.rounds},
                             {"same_parameters", same},
                             {"variants", rows},
                             {"epoch_start", start_rows}});
    fmt::print("wrote {}\n", o.json_path);
  }
  // cuBLAS may choose another algorithm while a stream is captured, and the fused head replaces its fc2
  // products: a difference there is reported, not an error (tests/gpu/test_fast_path.cpp holds it to 1e-5).
  return same || gemm == GemmImpl::cublas ? 0 : 1;
}

}  // namespace mnistdp::bench
