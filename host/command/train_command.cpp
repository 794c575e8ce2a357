#include "host/command/train_command.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "host/checkpoint/checkpoint.hpp"
#include "host/command/checkpoint_listener.hpp"
#include "host/command/explain.hpp"
#include "host/command/listeners.hpp"
#include "host/command/memory_usage.hpp"
#include "host/command/metrics.hpp"
#include "host/command/placement.hpp"
#include "host/command/progress.hpp"
#include "host/command/replica_setup.hpp"
#include "host/command/resume.hpp"
#include "host/command/run_file_checks.hpp"
#include "host/command/step_words.hpp"
#include "host/command/stop_signals.hpp"
#include "host/command/strategy_table.hpp"
#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "host/processes/mpi_process_group.hpp"
#include "host/processes/tcp_process_group.hpp"
#include "host/training/communicator.hpp"
#include "host/training/shard.hpp"
#include "host/training/trace.hpp"
#include "mnist_io/dataset.hpp"

namespace mnistdp {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

DataSplits load_data(const TrainOptions& o, bool report) {
  const std::filesystem::path dir = o.data ? find_data_dir(*o.data) : find_default_data_dir();
  DataSplits data = load_data_dir(dir);
  if (report)
    console_print(stdout, "data: {} from {} ({} training and {} test images)\n", data.name, data.dir.string(),
                  data.train.count, data.test.count);
  return data;
}

// The start-up table: devices, then each replica with its share of a full batch and of the last, short one
// (of a micro-batch, where a step accumulates several: the last micro-batch of an epoch is then the short
// one). In a multi-process run, rank 0 lists its own replicas and counts the others'.
// The strategy's line closes it.
void print_placement(const Placement& placement, const std::vector<std::unique_ptr<Replica>>& replicas,
                     const StrategyEntry& strategy, const std::string& how, int batch_size, int accumulate,
                     int train_count, int world_size) {
  for (const std::string& line : placement.device_lines)
    console_print(stdout, "device: {}\n", line);
  const int local = static_cast<int>(replicas.size());
  const int n = local * world_size;
  const int last = train_count % batch_size == 0 ? batch_size : train_count % batch_size;
  console_print(stdout, "{:>8}  {:<48} {:>10} {:>10}\n", "replica", "where",
                accumulate > 1 ? "rows/micro" : "rows/step", accumulate > 1 ? "last micro" : "last step");
  for (int r = 0; r < local; ++r)
    console_print(stdout, "{:>8}  {:<48} {:>10} {:>10}\n", r, replicas[r]->description(),
                  shard_of(batch_size, n, r).count, shard_of(last, n, r).count);
  if (world_size > 1) {
    // The other ranks' shards, as a range: torch.chunk gives the smaller ones to the last replicas.
    auto range = [&](int rows) {
      const int most = shard_of(rows, n, local).count, least = shard_of(rows, n, n - 1).count;
      return most == least ? fmt::format("{}", most) : fmt::format("{} to {}", least, most);
    };
    const std::string others = n - 1 == local ? fmt::format("{}", local) : fmt::format("{}-{}", local, n - 1);
    const std::string ranks = world_size == 2 ? "rank 1" : fmt::format("ranks 1 to {}", world_size - 1);
    console_print(stdout, "{:>8}  {:<48} {:>10} {:>10}\n", others,
                  fmt::format("{}, {} replica{} each", ranks, local, local == 1 ? "" : "s"),
                  range(batch_size), range(last));
  }
  console_print(stdout, "{}\n", fmt::format(fmt::runtime(strategy.start_line), how));
}

// The settings that must be the same on every rank for the ranks to train one model together, as each rank
// was started with them (a resumed run's saved settings are rank 0's alone, and reach the others afterwards).
// The files only rank 0 reads or writes (--resume, --init-from, --save, --metrics, --trace) count by whether
// they are given: their paths may differ (a checkpoint need only be on rank 0's node), but a rank given one
// that rank 0 was not, or not given one that rank 0 was, is a rank whose user expected something else to be
// read or written.
std::vector<Setting> run_settings(const TrainOptions& o, const TrainConfig& t, const DataSplits& data,
                                  int local_replicas, bool gpu) {
  const auto file = [](const std::optional<std::filesystem::path>& path) {
    return path ? std::string("a file") : std::string("none");
  };
  return {
      {"the data", fmt::format("{:016x} ({} training images)", fingerprint(data.train), data.train.count)},
      {"the replicas per process", fmt::format("{} on the {}", local_replicas, gpu ? "GPU" : "CPU")},
      {"--epochs", fmt::format("{}", t.epochs)},
      {"--batch-size", fmt::format("{}", t.batch_size)},
      {"--accumulate", fmt::format("{}", t.accumulate)},
      {"--lr", fmt::format("{}", t.sgd.lr)},
      {"--momentum", fmt::format("{}", t.sgd.momentum)},
      {"--dampening", fmt::format("{}", t.sgd.dampening)},
      {"--weight-decay", fmt::format("{}", t.sgd.weight_decay)},
      {"--nesterov", t.sgd.nesterov ? "on" : "off"},
      {"--seed", fmt::format("{}", t.seed)},
      {"--max-steps", fmt::format("{}", t.max_steps)},
      {"--check-replicas", fmt::format("{}", t.check_replicas)},
      {"--device", o.device},
      {"--gemm", o.gemm},
      {"--tf32", o.tf32 ? "on" : "off"},
      {"--activation", activation_name(t.activation)},
      {"--resume", file(o.resume)},
      {"--init-from", file(o.init_from)},
      {"--save", file(o.save)},
      {"--metrics", file(o.metrics)},
      {"--trace", file(o.trace)}};
}

// A float setting as the user wrote it: the shortest decimal that reads back to the same float (0.01, not
// the 0.009999999776482582 its conversion to double would show).
double as_written(float value) {
  return std::strtod(fmt::format("{}", value).c_str(), nullptr);
}

std::string start_record(const TrainConfig& t, const DataSplits& data,
                         const std::vector<std::unique_ptr<Replica>>& replicas) {
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
                        {"accumulate", t.accumulate},
                        {"lr", as_written(t.sgd.lr)},
                        {"momentum", as_written(t.sgd.momentum)},
                        {"dampening", as_written(t.sgd.dampening)},
                        {"weight_decay", as_written(t.sgd.weight_decay)},
                        {"nesterov", t.sgd.nesterov},
                        {"seed", t.seed},
                        {"activation", activation_name(t.activation)},
                        {"start_step", t.start_step}}
      .dump();
}

std::chrono::milliseconds rank_timeout(const TrainOptions& o) {
  return std::chrono::milliseconds(static_cast<long>(o.timeout_seconds * 1000.0));
}

// The options that only change how a GPU trains, as given on the command line, with their values: on the CPU
// they change nothing, and the user is told so.
std::vector<std::string> ignored_gpu_options(const TrainOptions& o) {
  std::vector<std::string> ignored;
  auto add = [&](std::string_view option, const std::string& value) {
    if (o.is_given(option))
      ignored.push_back(value.empty() ? std::string(option) : fmt::format("{} {}", option, value));
  };
  add("--devices", o.devices);
  add("--gemm", o.gemm);
  add("--tf32", "");
  add("--cuda-graphs", "");
  add("--fused-head", "");
  add("--fused-step", "");
  add("--pdl", "");
  add("--persistent", "");
  add("--steps-per-graph", std::to_string(o.steps_per_graph));
  return ignored;
}

// The last line of a run that was not stopped: what was run, and the final test accuracy.
std::string finished_line(const TrainConfig& t, const std::vector<EpochReport>& reports,
                          int steps_per_epoch) {
  const long end = reports.empty() ? t.start_step : reports.back().total_steps;
  const long run = end - t.start_step;
  if (run == 0) {
    const std::string why = t.max_steps > 0 && end >= t.max_steps
                                ? fmt::format("--max-steps {} reached", t.max_steps)
                                : fmt::format("--epochs {} reached", t.epochs);
    return fmt::format("finished: no step left to run ({}; {})", progress_words(end, steps_per_epoch), why);
  }
  double seconds = 0;
  for (const EpochReport& r : reports)
    seconds += r.seconds;
  const bool all_epochs = reports.back().complete && reports.back().epoch + 1 == t.epochs;
  std::string what = fmt::format("{} step{}", run, run == 1 ? "" : "s");
  if (all_epochs && t.start_step == 0)
    what = fmt::format("{} epoch{} ({} steps)", t.epochs, t.epochs == 1 ? "" : "s", run);
  else if (all_epochs)
    what += fmt::format(", to the end of epoch {}", t.epochs - 1);
  else
    what += fmt::format(" (--max-steps {} reached after {}; --epochs {})", t.max_steps,
                        step_words(end - 1, steps_per_epoch), t.epochs);
  std::string line = fmt::format("finished: {} in {:.2f} s of training", what, seconds);
  if (reports.back().test.count > 0)
    line += fmt::format("; final test accuracy {:.2f}%", 100.0 * reports.back().test.accuracy());
  return line;
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
  r.token = launch.run_token;
  r.listen_on_all = o.listen_all;
  return make_tcp_process_group(r);
}

int run_train(const TrainOptions& o, const LaunchInfo& launch, ProcessGroup* group) {
  // From here on, SIGINT, SIGTERM, SIGHUP and SIGPIPE end the run after the step in progress, with a
  // checkpoint.
  StopSignals signals;
  const bool root = !group || group->rank() == 0;  // only rank 0 prints the log and writes files
  const int world_size = group ? group->size() : 1;
  // A strategy that runs in one process is refused before the processes join (run_train_in_world).
  const StrategyEntry& strategy_row = strategy_entry(o.strategy);
  TrainConfig t = o.train;
  if (root) {
    console_print(stdout, "mnist-dp: SimpleNet 784-256-10, {} parameters\n", ParamLayout::kCount);
    if (group)
      console_print(stdout, "processes: {} started by {}; {}\n", world_size, launcher_name(launch.launcher),
                    group->description());
    // Before anything is loaded: a run must not do an epoch of work to find that it cannot save it, nor
    // destroy one of its own files.
    check_distinct_files(o);
    check_outputs_writable(o);
  }
  const Placement placement = choose_placement(o, launch);
  if (placement.gpu && !strategy_row.across_gpus && !all_on_one_device(placement))
    throw UsageError(
        fmt::format("--strategy {} takes the replicas of one GPU (--devices D --replicas N) or CPU "
                    "replicas: its collectives on CUDA are the same-device sum's",
                    strategy_row.name));
  const DataSplits data = load_data(o, root);
  if (group) require_same_on_all_ranks(*group, run_settings(o, t, data, placement.replicas, placement.gpu));
  StartState start = root ? start_state(o, t, data) : StartState{};
  if (group) start = share_start_state(*group, std::move(start), t);
  t.start_step = start.step;
  if (o.save)
    signals.set_message_on_kill(
        o.resume && root && same_file(*o.resume, *o.save)
            ? fmt::format(
                  "mnist-dp: stopped at once by a second signal; {} is left as it was, the checkpoint "
                  "resumed from (after {} steps)\n",
                  o.save->string(), start.step)
            : fmt::format("mnist-dp: stopped at once by a second signal, before this run saved a checkpoint; "
                          "nothing of it is in {}\n",
                          o.save->string()));
  else
    signals.set_message_on_kill(
        "mnist-dp: stopped at once by a second signal; nothing was saved (--save PATH keeps the progress)\n");
  // After start_state: a resumed run's is the saved one.
  if (root)
    console_print(stdout, "activation: {} ({})\n", activation_name(t.activation),
                  activation_row(t.activation).torch);
  std::vector<std::unique_ptr<Replica>> replicas =
      make_replicas(o, t.activation, data, placement, world_size);
  std::unique_ptr<Strategy> strategy = strategy_row.make({placement, replicas, group, rank_timeout(o)});
  const std::string how = strategy->description();
  if (root)
    print_placement(placement, replicas, strategy_row, how, t.batch_size, t.accumulate, data.train.count,
                    world_size);
  if (root && !placement.gpu) {
    const std::vector<std::string> ignored = ignored_gpu_options(o);
    if (!ignored.empty())
      console_print(stdout, "note: training on the CPU, so these GPU-only options are ignored: {}\n",
                    fmt::format("{}", fmt::join(ignored, ", ")));
  }
  if (o.explain && root) {
    std::vector<std::string> names;
    for (const auto& r : replicas)
      names.push_back(r->description());
    for (int r = static_cast<int>(replicas.size()); r < static_cast<int>(replicas.size()) * world_size; ++r)
      names.push_back(fmt::format("rank {}", r / static_cast<int>(replicas.size())));
    strategy_row.explain(stdout, t, data.train.count, names, how);
  }

  // The trainer broadcasts replica 0's parameters to the other replicas, and rank 0's to the other ranks
  // (which hold none of their own here).
  if (root) replicas[0]->load_parameters(start.params);
  if (start.momentum)
    for (auto& r : replicas)
      r->load_momentum(*start.momentum);

  std::unique_ptr<MetricsWriter> metrics;
  if (o.metrics && root)
    metrics = std::make_unique<MetricsWriter>(*o.metrics, start_record(t, data, replicas));

  if (root)
    console_print(stdout, "training: {} epoch{}, batch {}{}, {}, seed {}; host memory {:.0f} MiB\n", t.epochs,
                  t.epochs == 1 ? "" : "s", t.batch_size, accumulate_words(t.accumulate, t.batch_size),
                  sgd_words(t.sgd), t.seed, static_cast<double>(host_rss_bytes()) / kMiB);

  // mpirun hands its processes a pseudo-terminal whatever its own output is, so under MPI the progress line
  // is drawn only when asked for.
  const bool terminal = isatty(fileno(stdout)) != 0 && launch.launcher != Launcher::Mpi;
  const bool progress =
      root && (o.progress == ProgressMode::On || (o.progress == ProgressMode::Auto && terminal));
  Trainer trainer(std::move(replicas), std::move(strategy), data.train.count, t, group);
  const int steps_per_epoch = trainer.steps_per_epoch();
  std::optional<ConsoleListener> console;
  if (root) console.emplace(stdout, progress, t.epochs, trainer.step_rows());
#ifdef MNISTDP_CUDA_EMULATED
  if (console && placement.gpu) console->mark_times_emulated();
#endif
  CheckpointListener checkpoints(o, t, data, trainer, signals, root);
  // The checkpoint first: a line that says an epoch is done is printed once its checkpoint is on disk, and a
  // second signal from then on names that checkpoint.
  Listeners listener({&checkpoints, console ? &*console : nullptr, metrics.get()});
  const std::vector<EpochReport> reports = trainer.run(listener);
  if (o.trace && root) {
    std::vector<std::string> names;
    for (const auto& r : trainer.replicas())
      names.push_back(r->description());
    const std::vector<std::vector<StepMarks>> marks = trainer.take_trace();
    const std::vector<int> micro_batches = trainer.traced_micro_batches();
    const TraceRun run{trainer.world_replicas(), world_size, t.batch_size, t.accumulate, data.train.count};
    write_chrome_trace(*o.trace, marks, names, t.start_step, trainer.strategy().trace_phases(),
                       trainer.take_link_trace(), micro_batches, &run);
    // A timeline's entries are micro-batches where steps accumulate several: the steps they began.
    long traced = marks.empty() ? 0 : static_cast<long>(marks.front().size());
    if (!micro_batches.empty()) {
      long entries = traced;
      traced = 0;
      for (std::size_t s = 0; s < micro_batches.size() && entries > 0; ++s, ++traced)
        entries -= micro_batches[s];
    }
    if (traced == 0)
      console_print(stdout, "timeline: no step was run; {} holds no step\n", o.trace->string());
    else
      console_print(stdout,
                    "timeline of {} step{} ({}) written to {} (open it in ui.perfetto.dev or "
                    "chrome://tracing)\n",
                    traced, traced == 1 ? "" : "s",
                    steps_words(t.start_step, t.start_step + traced - 1, steps_per_epoch), o.trace->string());
  }
  // Every rank waits here until rank 0 has written its files: a failure there still reaches them all.
  if (group) group->barrier();

  if (signals.requested()) {
    const int sig = signals.signal();
    if (!root) return 128 + sig;
    const long end = reports.empty() ? t.start_step : reports.back().total_steps;
    const std::string why = sig == SIGPIPE  ? "SIGPIPE (standard output was closed)"
                            : sig == SIGHUP ? "SIGHUP (the terminal was closed)"
                                            : signal_name(sig);
    const std::string where = end == t.start_step ? std::string("before its first step")
                                                  : fmt::format("after {} ({} steps in all)",
                                                                step_words(end - 1, steps_per_epoch), end);
    if (o.save && checkpoints.saved_step() >= 0)
      console_print(stderr,
                    "mnist-dp: stopped by {} {}; checkpoint saved to {} (continue with --resume {})\n", why,
                    where, o.save->string(), o.save->string());
    else
      console_print(stderr, "mnist-dp: stopped by {} {}; nothing saved (--save PATH keeps the progress)\n",
                    why, where);
    return 128 + sig;
  }
  if (!root) return 0;
  console_print(stdout, "{}\n", finished_line(t, reports, steps_per_epoch));
  if (o.save && checkpoints.saved_step() >= 0) console_print(stdout, "checkpoint: {}\n", o.save->string());
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
  const Placement placement = choose_placement(o, LaunchInfo{}, "evaluating");
  const DataSplits data = load_data(o, true);
  // The activation the checkpoint was trained with (relu for a file from before it was recorded, or
  // PyTorch's SimpleNet).
  const Activation activation = checkpoint_activation(c, e.checkpoint);
  std::vector<std::unique_ptr<Replica>> replicas = make_replicas(o, activation, data, placement);
  replicas[0]->load_parameters(c.params);
  const EvalResult r = replicas[0]->evaluate();
  console_print(stdout, "{}: test loss {:.4f}, test accuracy {:.2f}% ({} of {} images) on {}\n",
                e.checkpoint.string(), r.mean_loss(), 100.0 * r.accuracy(), r.correct, r.count,
                replicas[0]->description());
  if (e.json)
    console_print(stdout, "{}\n",
                  nlohmann::json{{"checkpoint", e.checkpoint.string()},
                                 {"test_loss", r.mean_loss()},
                                 {"test_accuracy", r.accuracy()},
                                 {"correct", r.correct},
                                 {"count", r.count},
                                 {"activation", activation_name(activation)},
                                 {"device", replicas[0]->description()}}
                      .dump());
  return 0;
}

}  // namespace mnistdp
