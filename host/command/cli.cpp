#include "host/command/cli.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>
#include <string_view>

#include "host/command/strategy_table.hpp"
#include "host/command/train_command.hpp"
#include "host/processes/launch.hpp"
#include "host/processes/process_group.hpp"
#include "kernels/cuda/gemm/gemm_version.hpp"
#include "mnist_io/dataset.hpp"
#include "mnist_io/idx.hpp"

namespace mnistdp {

namespace {

constexpr const char* kVersion = "mnist-dp 0.1.0";

// One sentence per bad value, with the accepted range in plain numbers: CLI11's own checks print the limits
// of a double in full (300 digits), call "abc" out of range rather than not a number, and join the messages
// of combined checks.
CLI::Validator whole_number(unsigned long long least, unsigned long long most) {
  return CLI::Validator(
      [least, most](std::string& value) -> std::string {
        const std::string range = fmt::format("give a whole number from {} to {}", least, most);
        const bool negative = !value.empty() && value[0] == '-';
        const std::string_view digits =
            std::string_view(value).substr(!value.empty() && (value[0] == '-' || value[0] == '+') ? 1 : 0);
        if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos)
          return fmt::format("'{}' is not a whole number; give one from {} to {}", value, least, most);
        unsigned long long magnitude = 0;
        const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude);
        const bool fits = error == std::errc() && end == digits.data() + digits.size();
        // Every range here starts at 0 or above, so a negative number other than -0 is out of it.
        const bool in_range =
            fits && (magnitude == 0 || !negative) && magnitude >= least && magnitude <= most;
        if (!in_range) return fmt::format("{} is out of range; {}", value, range);
        return {};
      },
      fmt::format("{} to {}", least, most));
}

// The SGD settings are 32-bit floats: a value that is finite as a double may not be one as a float (1e99),
// and a tiny one becomes 0 (1e-50). Both are refused rather than changed.
constexpr double kFloatMax = std::numeric_limits<float>::max();
constexpr double kFloatMin = std::numeric_limits<float>::min();

// most_text: the upper limit as the message shows it (the float maximum as "3.4e38", not its 39 digits).
CLI::Validator real_number(double least, double most, std::string most_text) {
  return CLI::Validator(
      [least, most, most_text](std::string& value) -> std::string {
        const std::string range = fmt::format("give a number from {} to {}", least, most_text);
        char* end = nullptr;
        const double x = value.empty() ? 0.0 : std::strtod(value.c_str(), &end);
        if (value.empty() || end != value.c_str() + value.size() || std::isnan(x))
          return fmt::format("'{}' is not a number; give one from {} to {}", value, least, most_text);
        if (!std::isfinite(x) || x < least || x > most)
          return fmt::format("{} is out of range; {}", value, range);
        if (x != 0.0 && std::fabs(x) < kFloatMin)
          return fmt::format(
              "{} is too small for a 32-bit float (which would hold it as 0 or with fewer digits); give 0 "
              "or a number from 1.2e-38 to {}",
              value, most_text);
        return {};
      },
      fmt::format("{} to {}", least, most_text));
}

void add_train_options(CLI::App& train, TrainOptions& o) {
  TrainConfig& t = o.train;
  train.add_option(
      "--data", o.data,
      "Folder with the four MNIST files (raw or .gz), or a torchvision root holding MNIST/raw or "
      "FashionMNIST/raw. Default: ./data, then /usr/share/datasets/fashion-mnist");
  train.add_option("--epochs", t.epochs, "Passes over the training set")
      ->check(whole_number(1, 100000))
      ->capture_default_str();
  train.add_option("--batch-size", t.batch_size, "Global batch size, split across the replicas")
      ->check(whole_number(1, 60000))
      ->capture_default_str();
  train
      .add_option("--accumulate", t.accumulate,
                  "Micro-batches of --batch-size rows summed per optimiser step (gradient accumulation, "
                  "DDP's no_sync): the gradients are exchanged and SGD steps once every K batches, and a "
                  "step in the loss lines, --max-steps and checkpoints is K x batch rows")
      ->option_text("K")
      ->check(whole_number(1, 60000))
      ->capture_default_str();
  train.add_option("--lr", t.sgd.lr, "Learning rate")
      ->check(real_number(0, kFloatMax, "3.4e38"))
      ->capture_default_str();
  train.add_option("--momentum", t.sgd.momentum, "SGD momentum (torch.optim.SGD's)")
      ->check(real_number(0, kFloatMax, "3.4e38"))
      ->capture_default_str();
  train.add_option("--dampening", t.sgd.dampening, "Dampening of the momentum")
      ->check(real_number(0, 1, "1"))
      ->capture_default_str();
  train.add_option("--weight-decay", t.sgd.weight_decay, "L2 penalty added to the gradient")
      ->check(real_number(0, kFloatMax, "3.4e38"))
      ->capture_default_str();
  train.add_flag("--nesterov", t.sgd.nesterov, "Nesterov momentum (needs --momentum > 0 and no dampening)");
  train.add_option("--seed", t.seed, "Seed of the initial parameters and of every epoch's shuffle")
      ->check(whole_number(0, std::numeric_limits<std::uint64_t>::max()))
      ->capture_default_str();
  train.add_option("--log-interval", t.log_interval, "Print the loss every this many steps")
      ->check(whole_number(1, 1000000))
      ->capture_default_str();
  train.add_option("--max-steps", t.max_steps, "Stop after this many steps in all (0: no limit)")
      ->check(whole_number(0, 1'000'000'000'000))
      ->capture_default_str();
  train
      .add_option(
          "--replicas", o.replicas,
          "Model replicas: CPU threads, or replicas sharing one GPU (default: 1 on the CPU, one per GPU)")
      ->check(whole_number(1, 1024));
  train.add_option("--devices", o.devices, "GPUs to train on: all, or a list such as 0,1,3")
      ->check([](const std::string& v) {
        try {
          parse_device_list(v);
        } catch (const UsageError& e) {
          return std::string(e.what());
        }
        return std::string();
      })
      ->capture_default_str();
  train
      .add_option("--check-replicas", t.check_replicas,
                  "Every this many steps, verify that all replicas hold bit-identical parameters (0: never)")
      ->check(whole_number(0, 1'000'000'000))
      ->capture_default_str();
  train
      .add_option(
          "--threads", o.threads,
          "Threads per CPU replica: each step's products, gather and SGD split among them (the same results)")
      ->check(whole_number(1, 1024))
      ->capture_default_str();
  train.add_option("--device", o.device, "Where to train: auto (a GPU when one is usable), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  train.add_option("--gemm", o.gemm, "CUDA matrix product: " + gemm_names_text(/*with_descriptions=*/true))
      ->check(CLI::IsMember(gemm_names()))
      ->capture_default_str();
  std::map<std::string, Activation> activations;
  std::string activation_help = "The hidden layer's activation:";
  for (const ActivationRow& row : kActivations) {
    activations.emplace(row.name, row.id);
    activation_help += fmt::format(" {} ({}{}),", row.name, row.torch,
                                   row.id == kDefaultActivation ? ", the reference program's" : "");
  }
  activation_help.back() = ';';
  train.add_option("--activation", o.train.activation, activation_help + " a resumed run keeps its own")
      ->transform(CLI::CheckedTransformer(activations))
      ->default_str(activation_name(kDefaultActivation));
  train.add_flag("--cuda-graphs", o.cuda_graphs, "Replay each CUDA training step as one CUDA graph");
  train.add_flag("--fused-head", o.fused_head,
                 "Run fc2's forward and backward and the loss as one CUDA kernel (the same results, --gemm "
                 "cublas aside)");
  train.add_flag(
      "--fused-step", o.fused_step,
      "With one GPU replica: each step as three CUDA kernels in one graph; implies --cuda-graphs and "
      "--fused-head (the same results, --gemm cublas aside)");
  train.add_flag(
      "--pdl", o.pdl,
      "Launch the fused step's second and third kernels with programmatic dependent launch, so that "
      "each may start while the one before finishes (compute capability 9.0+); implies "
      "--fused-step (the same results)");
  train.add_flag(
      "--persistent", o.persistent,
      "With one GPU replica: the fused step's three kernels as one persistent kernel, a grid-wide barrier "
      "between them, up to --steps-per-graph consecutive steps a launch; implies --fused-step (the same "
      "results)");
  train.add_flag(
      "--tf32", o.tf32,
      "With --gemm cublas: cuBLAS's products on tensor cores in TF32 (inputs rounded to 10 bits of "
      "mantissa, sums in fp32), as PyTorch's allow_tf32; not the fp32 results, never the default");
  train
      .add_option("--steps-per-graph", o.steps_per_graph,
                  "With one GPU replica: replay up to N consecutive steps as one CUDA graph (or, with "
                  "--persistent, run them in one launch); above 1, implies --cuda-graphs (the same results)")
      ->check(whole_number(1, 4096))
      ->capture_default_str();
  train.add_option("--strategy", o.strategy, strategy_help())
      ->check(CLI::IsMember(strategy_names()))
      ->capture_default_str();
  train.add_option("--metrics", o.metrics, "Write metrics as JSON lines to this file");
  train.add_flag_callback(
      "--progress", [&o] { o.progress = ProgressMode::On; },
      "Show a progress line (default: only when the output is a terminal)");
  train.add_flag_callback(
      "--no-progress", [&o] { o.progress = ProgressMode::Off; }, "Never show a progress line");
  train.add_flag("--explain", o.explain, "Before training, tell in plain words what the first step does");
  train.add_option(
      "--save", o.save,
      "Save a checkpoint (safetensors, PyTorch's names) here after every epoch and when stopped");
  auto* resume = train.add_option("--resume", o.resume, "Continue the run saved in this checkpoint");
  train
      .add_option("--init-from", o.init_from,
                  "Start from the parameters in this safetensors file (one written by PyTorch will do)")
      ->excludes(resume);
  train.add_option(
      "--trace", o.trace,
      "Write a timeline of each replica's phases (Chrome trace format, for Perfetto) to this file");
  train.add_option("--trace-steps", o.trace_steps, "Steps the timeline covers, from the start")
      ->check(whole_number(1, 100000))
      ->capture_default_str();
  train
      .add_option(
          "--launcher", o.launcher,
          "Multi-process runs: auto (read what mpirun, torchrun or srun set), mpi, env (torchrun's or "
          "Slurm's variables), or none (one process, whatever the environment says). Under torchrun and "
          "srun, "
          "MNISTDP_RUN_TOKEN (or the file MNISTDP_RUN_TOKEN_FILE names) holds the secret that admits a rank")
      ->check(CLI::IsMember({"auto", "none", "mpi", "env"}))
      ->capture_default_str();
  train
      .add_option(
          "--timeout", o.timeout_seconds,
          "Multi-process runs: seconds a rank waits for the others (to join, and at each step) before "
          "it gives up with an error")
      ->check(real_number(0.1, 86400, "86400"))
      ->capture_default_str();
  train.add_flag(
      "--listen-all", o.listen_all,
      "Multi-process runs under torchrun or srun: rank 0 listens for the others on every interface, "
      "not only on MASTER_ADDR's");
}

void add_eval_options(CLI::App& eval, EvalOptions& o) {
  eval.add_option("--checkpoint", o.checkpoint, "The checkpoint to evaluate (safetensors)")->required();
  eval.add_option("--data", o.data, "As for train: the folder with the four MNIST files");
  eval.add_option("--device", o.device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  eval.add_flag("--json", o.json, "Also print the result as one line of JSON, last");
  eval.add_option("--gemm", o.gemm, "CUDA matrix product: " + gemm_names_text())
      ->check(CLI::IsMember(gemm_names()))
      ->capture_default_str();
}

void check_consistency(const TrainOptions& o) {
  // A resumed run's SGD settings are complete only once merged with the checkpoint's (start_state checks
  // them then).
  if (!o.resume) check_sgd_settings(o.train.sgd);
  const StrategyEntry& strategy = strategy_entry(o.strategy);
  if (!strategy.every_replica_steps && o.train.check_replicas > 0)
    throw UsageError(fmt::format(
        "--check-replicas compares the replicas the all-reduce keeps identical; under --strategy {} only "
        "device 0 keeps parameters between steps",
        strategy.name));
  if (!strategy.fast_paths) {
    for (const char* fast :
         {"--cuda-graphs", "--fused-head", "--fused-step", "--pdl", "--persistent", "--steps-per-graph"}) {
      if (o.is_given(fast))
        throw UsageError(
            fmt::format("{} is a fast path of the all-reduce's step; --strategy {} runs the plain launches",
                        fast, strategy.name));
    }
  }
  if (o.tf32 && o.gemm != "cublas")
    throw UsageError(
        "--tf32 is cuBLAS's tensor-core mode: it needs --gemm cublas (the hand-written products "
        "are fp32 only)");
}

}  // namespace

void check_sgd_settings(const SgdConfig& sgd) {
  if (sgd.nesterov && (sgd.momentum <= 0.0f || sgd.dampening != 0.0f))
    throw UsageError(
        "--nesterov needs --momentum greater than 0 and --dampening 0 (as torch.optim.SGD requires)");
}

bool TrainOptions::is_given(std::string_view option) const {
  return given.find(std::string(option)) != given.end();
}

std::vector<int> parse_device_list(const std::string& devices) {
  if (devices == "all") return {};
  std::vector<int> list;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = devices.find(',', start);
    const std::string item =
        devices.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const bool digits =
        !item.empty() && item.size() < 6 && item.find_first_not_of("0123456789") == std::string::npos;
    if (!digits)
      throw UsageError(fmt::format("'{}' is not a device number (use all, or a list such as 0,1,3)", item));
    const int device = std::stoi(item);
    for (int seen : list)
      if (seen == device) throw UsageError(fmt::format("device {} is listed twice", device));
    list.push_back(device);
    if (comma == std::string::npos) return list;
    start = comma + 1;
  }
}

CommandLine parse_command_line(int argc, const char* const* argv) {
  CommandLine result;
  CLI::App app{"mnist-dp: SimpleNet (784-256-10) trained data-parallel, by hand, in CUDA C++ and C++"};
  app.set_version_flag("--version", kVersion);
  // As in most tools, an option given twice takes its last value (so a script can append overrides).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.require_subcommand(1);
  CLI::App* train = app.add_subcommand("train", "Train SimpleNet as the reference PyTorch program does");
  add_train_options(*train, result.train);
  CLI::App* eval = app.add_subcommand("eval", "Report the test loss and accuracy of a checkpoint");
  add_eval_options(*eval, result.eval);
  // CLI11 would report a mistyped command only as "a subcommand is required"; name it instead.
  if (argc >= 2 && argv[1][0] != '-' && std::string_view(argv[1]) != train->get_name() &&
      std::string_view(argv[1]) != eval->get_name())
    throw UsageError(fmt::format(
        "unknown command '{}'; the commands are: train, eval\nRun 'mnist-dp --help' for the options.",
        argv[1]));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    if (app.exit(e, out, err) == 0) {
      result.text = out.str();
      return result;
    }
    std::string message = e.what();
    throw UsageError(fmt::format("{}\nRun 'mnist-dp {}--help' for the options.", message,
                                 train->parsed()  ? "train "
                                 : eval->parsed() ? "eval "
                                                  : ""));
  }
  if (eval->parsed()) {
    result.action = CommandLine::Action::Eval;
    return result;
  }
  for (const CLI::Option* option : train->get_options())
    if (option->count() > 0) result.train.given.insert(option->get_name());
  check_consistency(result.train);
  result.train.train.trace_steps = result.train.trace ? result.train.trace_steps : 0;
  result.action = CommandLine::Action::Train;
  return result;
}

namespace {

// The one line a failure is reported with, without the program's name: "data error: ...", "error: ...".
// Usage errors exit with 2, everything else with 1.
struct Failure {
  int exit_code;
  std::string text;
};

Failure describe(const std::exception& e) {
  if (dynamic_cast<const UsageError*>(&e) || dynamic_cast<const LaunchError*>(&e)) return {2, e.what()};
  if (dynamic_cast<const DataError*>(&e)) return {1, fmt::format("data error: {}", e.what())};
  return {1, fmt::format("error: {}", e.what())};
}

// Runs `mnist-dp train` in the world its launcher made: joins the other processes first, and on failure tells
// them why (after saying it here), so that every rank ends, non-zero, with the failing rank's message.
int run_train_in_world(const TrainOptions& options, const std::string& prefix) {
  const LaunchInfo launch = detect_launch(options.launcher, process_environment());
  const std::string ranked = launch.rank == 0 ? prefix : fmt::format("[rank {}] {}", launch.rank, prefix);
  std::unique_ptr<ProcessGroup> group;
  try {
    if (const StrategyEntry& strategy = strategy_entry(options.strategy);
        launch.multi_process() && !strategy.across_processes)
      throw UsageError(
          fmt::format("--strategy {} is {}'s, which runs in one process; across processes use the all-reduce "
                      "(--strategy allreduce, DistributedDataParallel's)",
                      strategy.name, strategy.torch));
    group = join_process_group(launch, options);
    return run_train(options, launch, group.get());
  } catch (const std::exception& e) {
    const Failure failure = describe(e);
    fmt::print(stderr, "{}{}\n", ranked, failure.text);
    std::fflush(stderr);
    if (group) {
      const auto* remote = dynamic_cast<const RemoteRankError*>(&e);
      // The other ranks say "error: rank N failed: ..." themselves.
      const std::string_view text = failure.text;
      const std::string_view plain = text.substr(text.rfind("error: ", 0) == 0 ? 7 : 0);
      group->abort(remote ? remote->rank() : launch.rank, remote ? e.what() : std::string(plain));
    }
    return failure.exit_code;
  }
}

}  // namespace

int run_cli(int argc, const char* const* argv) {
  const std::string prefix = "mnist-dp: ";
  try {
    const CommandLine command = parse_command_line(argc, argv);
    if (command.action == CommandLine::Action::Exit) {
      fmt::print("{}", command.text);
      return 0;
    }
    if (command.action == CommandLine::Action::Eval) return run_eval(command.eval);
    return run_train_in_world(command.train, prefix);
  } catch (const std::exception& e) {
    const Failure failure = describe(e);
    fmt::print(stderr, "{}{}\n", prefix, failure.text);
    return failure.exit_code;
  }
}

}  // namespace mnistdp
