#include "host/train_command.hpp"

#include <fmt/format.h>
#include <unistd.h>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "host/communicator.hpp"
#include "host/cpu_replica.hpp"
#include "host/init.hpp"
#include "host/memory_usage.hpp"
#include "host/metrics.hpp"
#include "host/params.hpp"
#include "host/progress.hpp"
#include "kernels/linear.hpp"
#include "mnist_io/dataset.hpp"

#ifdef MNISTDP_WITH_CUDA
#include "host/cuda_replica.hpp"
#endif

namespace mnistdp {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

DataSplits load_data(const TrainOptions& o) {
  const std::filesystem::path dir = o.data ? find_data_dir(*o.data) : find_default_data_dir();
  DataSplits data = load_data_dir(dir);
  fmt::print("data: {} from {} ({} training and {} test images)\n", data.name, data.dir.string(),
             data.train.count, data.test.count);
  return data;
}

// Where the replicas will live, decided before the data is read so that an impossible --device fails at once.
struct Placement {
  bool gpu = false;
  int device = 0;
  std::string description;  // one line for the start-up report
};

Placement choose_placement(const TrainOptions& o) {
  const Placement cpu{false, 0,
                      fmt::format("cpu, OpenBLAS with {} thread{}", o.threads, o.threads == 1 ? "" : "s")};
#ifdef MNISTDP_WITH_CUDA
  if (o.device == "cpu") return cpu;
  std::string why_none;
  const std::vector<CudaDeviceInfo> devices = list_cuda_devices(why_none);
  if (!devices.empty()) {
    const CudaDeviceInfo& d = devices.front();
    return {true, d.index,
            fmt::format("cuda:{} {} (compute capability {}.{}, {} SMs, {:.1f} GiB, {:.1f} GiB free), gemm {}",
                        d.index, d.name, d.cc_major, d.cc_minor, d.sm_count,
                        static_cast<double>(d.total_memory) / kGiB, static_cast<double>(d.free_memory) / kGiB,
                        o.gemm)};
  }
  if (o.device == "cuda")
    throw std::runtime_error(fmt::format("--device cuda: no usable CUDA device ({})", why_none));
  fmt::print("no usable CUDA device ({}); training on the CPU\n", why_none);
  return cpu;
#else
  if (o.device == "cuda")
    throw std::runtime_error(
        "--device cuda: this build of mnist-dp has no CUDA support (built with the cpu preset)");
  return cpu;
#endif
}

std::vector<std::unique_ptr<Replica>> make_replicas(const TrainOptions& o, const DataSplits& data,
                                                    [[maybe_unused]] const Placement& placement) {
  std::vector<std::unique_ptr<Replica>> replicas;
#ifdef MNISTDP_WITH_CUDA
  if (placement.gpu) {
    replicas.push_back(make_cuda_replica(data, placement.device, parse_gemm_impl(o.gemm)));
    return replicas;
  }
#endif
  blas::set_threads(o.threads);
  replicas.push_back(std::make_unique<CpuReplica>(data, 0));
  return replicas;
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
  fmt::print("device: {}\n", placement.description);
  for (const auto& r : replicas)
    fmt::print("replica: {}\n", r->description());

  std::vector<float> params(ParamLayout::kCount);
  init_parameters(params, t.seed);
  replicas[0]->load_parameters(params);

  // The metrics file is opened before training so that a bad path fails now, not after five epochs.
  std::unique_ptr<MetricsWriter> metrics;
  if (o.metrics) metrics = std::make_unique<MetricsWriter>(*o.metrics, start_record(o, data, replicas));

  fmt::print(
      "training: {} epochs, batch {}, lr {}, momentum {}, weight decay {}, seed {}; host memory {:.0f} MiB\n",
      t.epochs, t.batch_size, t.sgd.lr, t.sgd.momentum, t.sgd.weight_decay, t.seed,
      static_cast<double>(host_rss_bytes()) / kMiB);
  std::fflush(stdout);

  const bool progress =
      o.progress == ProgressMode::On || (o.progress == ProgressMode::Auto && isatty(fileno(stdout)) != 0);
  ConsoleListener console(stdout, progress, t.epochs, t.batch_size);
  TeeListener listener(console, metrics.get());
  Trainer trainer(std::move(replicas), make_host_communicator(), data.train.count, t);
  const std::vector<EpochReport> reports = trainer.run(listener);

  double seconds = 0;
  for (const EpochReport& r : reports)
    seconds += r.seconds;
  if (!reports.empty() && reports.back().test.count > 0)
    fmt::print("finished: {} epoch{} in {:.2f} s of training; final test accuracy {:.2f}%\n", reports.size(),
               reports.size() == 1 ? "" : "s", seconds, 100.0 * reports.back().test.accuracy());
  return 0;
}

}  // namespace mnistdp
