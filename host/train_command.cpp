#include "host/train_command.hpp"

#include <fmt/format.h>
#include <unistd.h>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "host/communicator.hpp"
#include "host/explain.hpp"
#include "host/init.hpp"
#include "host/memory_usage.hpp"
#include "host/metrics.hpp"
#include "host/params.hpp"
#include "host/placement.hpp"
#include "host/progress.hpp"
#include "host/shard.hpp"
#include "host/trace.hpp"
#include "mnist_io/dataset.hpp"

namespace mnistdp {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

DataSplits load_data(const TrainOptions& o) {
  const std::filesystem::path dir = o.data ? find_data_dir(*o.data) : find_default_data_dir();
  DataSplits data = load_data_dir(dir);
  fmt::print("data: {} from {} ({} training and {} test images)\n", data.name, data.dir.string(),
             data.train.count, data.test.count);
  return data;
}

// The start-up table: devices, then each replica with its share of a full batch and of the last, short one.
void print_placement(const Placement& placement, const std::vector<std::unique_ptr<Replica>>& replicas,
                     const Communicator& communicator, int batch_size, int train_count) {
  for (const std::string& line : placement.device_lines)
    fmt::print("device: {}\n", line);
  const int n = static_cast<int>(replicas.size());
  const int last = train_count % batch_size == 0 ? batch_size : train_count % batch_size;
  fmt::print("{:>8}  {:<48} {:>10} {:>10}\n", "replica", "where", "rows/step", "last step");
  for (int r = 0; r < n; ++r)
    fmt::print("{:>8}  {:<48} {:>10} {:>10}\n", r, replicas[r]->description(),
               shard_of(batch_size, n, r).count, shard_of(last, n, r).count);
  fmt::print("all-reduce: {}\n", communicator.description());
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

}  // namespace

int run_train(const TrainOptions& o) {
  const TrainConfig& t = o.train;
  fmt::print("mnist-dp: SimpleNet 784-256-10, {} parameters\n", ParamLayout::kCount);
  const Placement placement = choose_placement(o);
  const DataSplits data = load_data(o);
  std::vector<std::unique_ptr<Replica>> replicas = make_replicas(o, data, placement);
  std::unique_ptr<Communicator> communicator = make_communicator(placement, replicas);
  print_placement(placement, replicas, *communicator, t.batch_size, data.train.count);
  if (o.explain) {
    std::vector<std::string> names;
    for (const auto& r : replicas)
      names.push_back(r->description());
    explain_first_step(stdout, t, data.train.count, names, communicator->description());
  }

  std::vector<float> params(ParamLayout::kCount);
  init_parameters(params, t.seed);
  replicas[0]->load_parameters(params);

  // The metrics file is opened before training so that a bad path fails now, not after five epochs.
  std::unique_ptr<MetricsWriter> metrics;
  if (o.metrics) metrics = std::make_unique<MetricsWriter>(*o.metrics, start_record(o, data, replicas));

  fmt::print(
      "training: {} epoch{}, batch {}, lr {}, momentum {}, weight decay {}, seed {}; host memory {:.0f} "
      "MiB\n",
      t.epochs, t.epochs == 1 ? "" : "s", t.batch_size, t.sgd.lr, t.sgd.momentum, t.sgd.weight_decay, t.seed,
      static_cast<double>(host_rss_bytes()) / kMiB);
  std::fflush(stdout);

  const bool progress =
      o.progress == ProgressMode::On || (o.progress == ProgressMode::Auto && isatty(fileno(stdout)) != 0);
  ConsoleListener console(stdout, progress, t.epochs, t.batch_size);
  TeeListener listener(console, metrics.get());
  Trainer trainer(std::move(replicas), std::move(communicator), data.train.count, t);
  const std::vector<EpochReport> reports = trainer.run(listener);
  if (o.trace) {
    std::vector<std::string> names;
    for (const auto& r : trainer.replicas())
      names.push_back(r->description());
    write_chrome_trace(*o.trace, trainer.take_trace(), names);
    fmt::print(
        "timeline of the first {} steps written to {} (open it in ui.perfetto.dev or chrome://tracing)\n",
        t.trace_steps, o.trace->string());
  }

  double seconds = 0;
  for (const EpochReport& r : reports)
    seconds += r.seconds;
  if (!reports.empty() && reports.back().test.count > 0)
    fmt::print("finished: {} epoch{} in {:.2f} s of training; final test accuracy {:.2f}%\n", reports.size(),
               reports.size() == 1 ? "" : "s", seconds, 100.0 * reports.back().test.accuracy());
  return 0;
}

}  // namespace mnistdp
