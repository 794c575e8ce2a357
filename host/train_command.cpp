#include "host/train_command.hpp"

#include <fmt/format.h>
#include <unistd.h>
#include <csignal>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "host/checkpoint.hpp"
#include "host/communicator.hpp"
#include "host/explain.hpp"
#include "host/init.hpp"
#include "host/memory_usage.hpp"
#include "host/metrics.hpp"
#include "host/mpi_process_group.hpp"
#include "host/params.hpp"
#include "host/placement.hpp"
#include "host/progress.hpp"
#include "host/shard.hpp"
#include "host/stop_signals.hpp"
#include "host/tcp_process_group.hpp"
#include "host/trace.hpp"
#include "mnist_io/dataset.hpp"

namespace mnistdp {

namespace {

// The batch size goes into the checkpoint: a run resumed with another one would not be the same run.
constexpr std::string_view kBatchSizeKey = "mnist_dp.batch_size";
constexpr double kMiB = 1024.0 * 1024.0;

DataSplits load_data(const TrainOptions& o, bool report) {
  const std::filesystem::path dir = o.data ? find_data_dir(*o.data) : find_default_data_dir();
  DataSplits data = load_data_dir(dir);
  if (report)
    fmt::print("data: {} from {} ({} training and {} test images)\n", data.name, data.dir.string(),
               data.train.count, data.test.count);
  return data;
}

// The start-up table: devices, then each replica with its share of a full batch and of the last, short one.
// In a multi-process run, rank 0 lists its own replicas and counts the others'.
void print_placement(const Placement& placement, const std::vector<std::unique_ptr<Replica>>& replicas,
                     const Communicator& communicator, int batch_size, int train_count, int world_size) {
  for (const std::string& line : placement.device_lines)
    fmt::print("device: {}\n", line);
  const int local = static_cast<int>(replicas.size());
  const int n = local * world_size;
  const int last = train_count % batch_size == 0 ? batch_size : train_count % batch_size;
  fmt::print("{:>8}  {:<48} {:>10} {:>10}\n", "replica", "where", "rows/step", "last step");
  for (int r = 0; r < local; ++r)
    fmt::print("{:>8}  {:<48} {:>10} {:>10}\n", r, replicas[r]->description(),
               shard_of(batch_size, n, r).count, shard_of(last, n, r).count);
  if (world_size > 1) {
    // The other ranks' shards, as a range: torch.chunk gives the smaller ones to the last replicas.
    auto range = [&](int rows) {
      const int most = shard_of(rows, n, local).count, least = shard_of(rows, n, n - 1).count;
      return most == least ? fmt::format("{}", most) : fmt::format("{} to {}", least, most);
    };
    const std::string others = n - 1 == local ? fmt::format("{}", local) : fmt::format("{}-{}", local, n - 1);
    const std::string ranks = world_size == 2 ? "rank 1" : fmt::format("ranks 1 to {}", world_size - 1);
    fmt::print("{:>8}  {:<48} {:>10} {:>10}\n", others,
               fmt::format("{}, {} replica{} each", ranks, local, local == 1 ? "" : "s"), range(batch_size),
               range(last));
  }
  fmt::print("all-reduce: {}\n", communicator.description());
}

// Everything that must be the same on every rank for the ranks to train one model together.
std::string run_identity(const TrainConfig& t, const DataSplits& data, int local_replicas, bool gpu) {
  return fmt::format(
      "data {:016x} ({} training images), {} replica{} per process on the {}, epochs {}, batch "
      "{}, lr {}, momentum {}, dampening {}, weight decay {}, nesterov {}, seed {}, starting at "
      "step {}, max steps {}, check every {} steps",
      fingerprint(data.train), data.train.count, local_replicas, local_replicas == 1 ? "" : "s",
      gpu ? "GPU" : "CPU", t.epochs, t.batch_size, t.sgd.lr, t.sgd.momentum, t.sgd.dampening,
      t.sgd.weight_decay, t.sgd.nesterov, t.seed, t.start_step, t.max_steps, t.check_replicas);
}

std::string start_record(const TrainOptions& o, const DataSplits& data,
                         const std::vector<std::unique_ptr<Replica>>& replicas) {
  const TrainConfig& t = o.train;
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& r : replicas)
    devices.push_back(r->description());
  return nlohmann::json{{"data", data.name},
                        {"data_dir", data.dir.string()},
                        {"train_count", data.train.count},
                        {"test_count", data.test.count},
                        {"replicas", devices},
                        {"epochs", t.epochs},
                        {"batch_size", t.batch_size},
                        {"lr", t.sgd.lr},
                        {"momentum", t.sgd.momentum},
                        {"dampening", t.sgd.dampening},
                        {"weight_decay", t.sgd.weight_decay},
                        {"nesterov", t.sgd.nesterov},
                        {"seed", t.seed}}
      .dump();
}

// Where the run starts: from the seed, from a parameter file (--init-from), or where a checkpoint left off
// (--resume), which also brings back the momentum, the step and the seed.
struct StartState {
  std::vector<float> params;
  std::optional<std::vector<float>> momentum;
  long step = 0;
};

StartState start_state(const TrainOptions& o, TrainConfig& t, const DataSplits& data) {
  StartState state;
  if (o.resume) {
    Checkpoint c = load_checkpoint(*o.resume);
    if (!c.has_training_state)
      throw CheckpointError(
          fmt::format("{}: holds parameters but no training state (a file written by PyTorch?); "
                      "start from it with --init-from instead of --resume",
                      o.resume->string()));
    if (c.data_fingerprint != fingerprint(data.train))
      throw CheckpointError(
          fmt::format("{}: was trained on other data (fingerprint {:016x}, this data set {:016x})",
                      o.resume->string(), c.data_fingerprint, fingerprint(data.train)));
    if (const auto b = c.extra.find(std::string(kBatchSizeKey));
        b != c.extra.end() && b->second != std::to_string(t.batch_size))
      throw UsageError(
          fmt::format("--resume {}: the run used --batch-size {}; resume it with the same batch size",
                      o.resume->string(), b->second));
    t.seed = c.seed;
    state.step = c.step;
    state.params = std::move(c.params);
    state.momentum = std::move(c.momentum);
    fmt::print("resuming: {} after {} steps ({} epochs complete), seed {}\n", o.resume->string(), c.step,
               c.epoch, c.seed);
    return state;
  }
  if (o.init_from) {
    state.params = load_checkpoint(*o.init_from).params;
    fmt::print("initial parameters: {}\n", o.init_from->string());
    return state;
  }
  state.params.resize(ParamLayout::kCount);
  init_parameters(state.params, t.seed);
  return state;
}

// A multi-process run's start comes from rank 0, which alone reads --resume or --init-from (so the file need
// only be on rank 0's node, where rank 0 also saves): the step, the seed and the momentum are broadcast to
// the other ranks here; the parameters reach them through the trainer, which broadcasts rank 0's at its
// start.
StartState share_start_state(ProcessGroup& group, StartState state, TrainConfig& t) {
  struct Header {
    std::int64_t step;
    std::uint64_t seed;
    std::int32_t has_momentum;
    std::int32_t unused;
  } header{state.step, t.seed, state.momentum ? 1 : 0, 0};
  group.broadcast(std::as_writable_bytes(std::span(&header, 1)));
  if (group.rank() != 0) {
    state.step = header.step;
    t.seed = header.seed;
    state.momentum.reset();
    if (header.has_momentum != 0) state.momentum.emplace(ParamLayout::kCount, 0.0f);
  }
  if (state.momentum) group.broadcast(std::as_writable_bytes(std::span(*state.momentum)));
  return state;
}

// Saves a checkpoint after every epoch (and after a stopped one), and turns SIGINT/SIGTERM into a stop
// request. writes: false on the ranks other than 0, which stop with the others but save nothing.
class CheckpointListener final : public TrainListener {
 public:
  CheckpointListener(const TrainOptions& o, const TrainConfig& t, const DataSplits& data,
                     const Trainer& trainer, const StopSignals& signals, bool writes)
      : o_(o),
        t_(t),
        fingerprint_(fingerprint(data.train)),
        trainer_(trainer),
        signals_(signals),
        writes_(writes) {}

  bool stop_requested() override { return signals_.requested(); }

  void on_epoch_end(const EpochReport& r) override {
    if (!o_.save || !writes_) return;
    Checkpoint c;
    c.params.resize(ParamLayout::kCount);
    Replica& replica = *trainer_.replicas()[0];
    replica.store_parameters(c.params);
    if (replica.has_momentum()) {
      c.momentum.emplace(ParamLayout::kCount);
      replica.store_momentum(*c.momentum);
    }
    c.epoch = r.complete ? r.epoch + 1 : r.epoch;
    c.step = r.total_steps;
    c.seed = t_.seed;
    c.data_fingerprint = fingerprint_;
    // The settings of the run, so that a reader (tests/python/test_step_vs_torch.py) can redo its steps.
    c.extra[std::string(kBatchSizeKey)] = std::to_string(t_.batch_size);
    c.extra["mnist_dp.sgd.lr"] = fmt::format("{}", t_.sgd.lr);
    c.extra["mnist_dp.sgd.momentum"] = fmt::format("{}", t_.sgd.momentum);
    c.extra["mnist_dp.sgd.dampening"] = fmt::format("{}", t_.sgd.dampening);
    c.extra["mnist_dp.sgd.weight_decay"] = fmt::format("{}", t_.sgd.weight_decay);
    c.extra["mnist_dp.sgd.nesterov"] = t_.sgd.nesterov ? "true" : "false";
    save_checkpoint(*o_.save, c);
    saved_step_ = r.total_steps;
  }

  long saved_step() const { return saved_step_; }

 private:
  const TrainOptions& o_;
  const TrainConfig& t_;
  std::uint64_t fingerprint_;
  const Trainer& trainer_;
  const StopSignals& signals_;
  bool writes_;
  long saved_step_ = -1;
};

// The listeners of one run, each told of every event.
class Listeners final : public TrainListener {
 public:
  // Null entries (a listener that is not wanted in this run) are left out.
  explicit Listeners(const std::vector<TrainListener*>& all) {
    for (TrainListener* l : all)
      if (l) all_.push_back(l);
  }
  void on_step_loss(const StepLoss& s) override {
    for (auto* l : all_)
      l->on_step_loss(s);
  }
  void on_step(int epoch, int step, int steps) override {
    for (auto* l : all_)
      l->on_step(epoch, step, steps);
  }
  void on_epoch_end(const EpochReport& r) override {
    for (auto* l : all_)
      l->on_epoch_end(r);
  }
  bool stop_requested() override {
    for (auto* l : all_)
      if (l->stop_requested()) return true;
    return false;
  }

 private:
  std::vector<TrainListener*> all_;
};

}  // namespace

namespace {

std::chrono::milliseconds rank_timeout(const TrainOptions& o) {
  return std::chrono::milliseconds(static_cast<long>(o.timeout_seconds * 1000.0));
}

}  // namespace

std::unique_ptr<ProcessGroup> join_process_group(const LaunchInfo& launch, const TrainOptions& o) {
  if (!launch.multi_process()) return nullptr;
  if (launch.launcher == Launcher::Mpi) {
    std::unique_ptr<ProcessGroup> group = make_mpi_process_group();
    if (group->rank() != launch.rank || group->size() != launch.world_size)
      throw LaunchError(fmt::format("MPI says this is rank {} of {}, but the environment said rank {} of {}",
                                    group->rank(), group->size(), launch.rank, launch.world_size));
    return group;
  }
  TcpRendezvous r;
  r.master_addr = launch.master_addr;
  r.master_port = launch.master_port;
  r.rank = launch.rank;
  r.world_size = launch.world_size;
  r.timeout = rank_timeout(o);
  return make_tcp_process_group(r);
}

int run_train(const TrainOptions& o, const LaunchInfo& launch, ProcessGroup* group) {
  // From here on, SIGINT and SIGTERM end the run after the step in progress, with a checkpoint.
  const StopSignals signals;
  const bool root = !group || group->rank() == 0;  // only rank 0 prints the log and writes files
  const int world_size = group ? group->size() : 1;
  TrainConfig t = o.train;
  if (root) {
    fmt::print("mnist-dp: SimpleNet 784-256-10, {} parameters\n", ParamLayout::kCount);
    if (group)
      fmt::print("processes: {} started by {}; {}\n", world_size, launcher_name(launch.launcher),
                 group->description());
  }
  const Placement placement = choose_placement(o, launch);
  const DataSplits data = load_data(o, root);
  StartState start = root ? start_state(o, t, data) : StartState{};
  if (group) start = share_start_state(*group, std::move(start), t);
  t.start_step = start.step;
  if (group)
    require_same_on_all_ranks(*group, "the run's settings",
                              run_identity(t, data, placement.replicas, placement.gpu));
  std::vector<std::unique_ptr<Replica>> replicas = make_replicas(o, data, placement);
  std::unique_ptr<Communicator> communicator = make_communicator(placement, replicas, group, rank_timeout(o));
  if (root) print_placement(placement, replicas, *communicator, t.batch_size, data.train.count, world_size);
  if (root && !placement.gpu &&
      (o.cuda_graphs || o.fused_head || o.fused_step || o.pdl || o.persistent || o.steps_per_graph > 1 ||
       o.tf32))
    fmt::print(
        "note: --cuda-graphs, --fused-head, --fused-step, --pdl, --persistent, --steps-per-graph and --tf32 "
        "change CUDA replicas only; these CPU replicas run as always\n");
  if (o.explain && root) {
    std::vector<std::string> names;
    for (const auto& r : replicas)
      names.push_back(r->description());
    for (int r = static_cast<int>(replicas.size()); r < static_cast<int>(replicas.size()) * world_size; ++r)
      names.push_back(fmt::format("rank {}", r / static_cast<int>(replicas.size())));
    explain_first_step(stdout, t, data.train.count, names, communicator->description());
  }

  // The trainer broadcasts replica 0's parameters to the other replicas, and rank 0's to the other ranks
  // (which hold none of their own here).
  if (root) replicas[0]->load_parameters(start.params);
  if (start.momentum)
    for (auto& r : replicas)
      r->load_momentum(*start.momentum);

  // The metrics file is opened before training so that a bad path fails now, not after five epochs.
  std::unique_ptr<MetricsWriter> metrics;
  if (o.metrics && root)
    metrics = std::make_unique<MetricsWriter>(*o.metrics, start_record(o, data, replicas));

  if (root)
    fmt::print(
        "training: {} epoch{}, batch {}, lr {}, momentum {}, weight decay {}, seed {}; host memory {:.0f} "
        "MiB\n",
        t.epochs, t.epochs == 1 ? "" : "s", t.batch_size, t.sgd.lr, t.sgd.momentum, t.sgd.weight_decay,
        t.seed, static_cast<double>(host_rss_bytes()) / kMiB);
  std::fflush(stdout);

  // mpirun hands its processes a pseudo-terminal whatever its own output is, so under MPI the progress line
  // is drawn only when asked for.
  const bool terminal = isatty(fileno(stdout)) != 0 && launch.launcher != Launcher::Mpi;
  const bool progress =
      root && (o.progress == ProgressMode::On || (o.progress == ProgressMode::Auto && terminal));
  Trainer trainer(std::move(replicas), std::move(communicator), data.train.count, t, group);
  std::optional<ConsoleListener> console;
  if (root) console.emplace(stdout, progress, t.epochs, t.batch_size);
  CheckpointListener checkpoints(o, t, data, trainer, signals, root);
  Listeners listener({console ? &*console : nullptr, &checkpoints, metrics.get()});
  const std::vector<EpochReport> reports = trainer.run(listener);
  if (o.trace && root) {
    std::vector<std::string> names;
    for (const auto& r : trainer.replicas())
      names.push_back(r->description());
    write_chrome_trace(*o.trace, trainer.take_trace(), names);
    fmt::print(
        "timeline of the first {} steps written to {} (open it in ui.perfetto.dev or chrome://tracing)\n",
        t.trace_steps, o.trace->string());
  }
  // Every rank waits here until rank 0 has written its files: a failure there still reaches them all.
  if (group) group->any(false);

  if (signals.requested()) {
    const int sig = signals.signal();
    const long step = reports.empty() ? t.start_step : reports.back().total_steps;
    if (!root) return 128 + sig;
    if (o.save)
      fmt::print(
          stderr,
          "mnist-dp: stopped by {} after step {}; checkpoint saved to {} (continue with --resume {})\n",
          sig == SIGINT ? "SIGINT" : "SIGTERM", step, o.save->string(), o.save->string());
    else
      fmt::print(stderr,
                 "mnist-dp: stopped by {} after step {}; nothing saved (--save PATH keeps the progress)\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", step);
    return 128 + sig;
  }
  if (!root) return 0;
  double seconds = 0;
  for (const EpochReport& r : reports)
    seconds += r.seconds;
  if (!reports.empty() && reports.back().test.count > 0)
    fmt::print("finished: {} epoch{} in {:.2f} s of training; final test accuracy {:.2f}%\n", reports.size(),
               reports.size() == 1 ? "" : "s", seconds, 100.0 * reports.back().test.accuracy());
  if (o.save && checkpoints.saved_step() >= 0) fmt::print("checkpoint: {}\n", o.save->string());
  return 0;
}

int run_eval(const EvalOptions& e) {
  TrainOptions o;
  o.data = e.data;
  o.device = e.device;
  o.gemm = e.gemm;
  o.devices = std::to_string(0);  // the first visible GPU (a string literal here trips GCC 12 bug 105329)
  o.replicas = 1;
  const Checkpoint c = load_checkpoint(e.checkpoint);
  const Placement placement = choose_placement(o, LaunchInfo{});
  const DataSplits data = load_data(o, true);
  std::vector<std::unique_ptr<Replica>> replicas = make_replicas(o, data, placement);
  replicas[0]->load_parameters(c.params);
  const EvalResult r = replicas[0]->evaluate();
  fmt::print("{}: test loss {:.4f}, test accuracy {:.2f}% ({} of {} images) on {}\n", e.checkpoint.string(),
             r.mean_loss(), 100.0 * r.accuracy(), r.correct, r.count, replicas[0]->description());
  if (e.json)
    fmt::print("{}\n", nlohmann::json{{"checkpoint", e.checkpoint.string()},
                                      {"test_loss", r.mean_loss()},
                                      {"test_accuracy", r.accuracy()},
                                      {"correct", r.correct},
                                      {"count", r.count},
                                      {"device", replicas[0]->description()}}
                           .dump());
  return 0;
}

}  // namespace mnistdp
