#pragma once
// The command line: `mnist-dp train [options]`. Parsing is separate from running so that tests can check
// every refusal of a bad value without training anything.
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "host/training/trainer.hpp"

namespace mnistdp {

enum class ProgressMode { Auto, On, Off };

struct TrainOptions {
  std::optional<std::filesystem::path> data;  // none: search ./data, then Debian's Fashion-MNIST
  TrainConfig train;
  int replicas = 0;              // 0: one on the CPU, one per GPU; more: CPU threads, or replicas on one GPU
  std::string devices = "all";   // GPUs to use: "all" or a list such as "0,1,3"
  int threads = 1;               // threads per CPU replica (ThreadTeam)
  std::string device = "auto";   // auto, cpu, cuda
  std::string gemm = "blocked";  // the CUDA matrix product: a name of kGemmVersions (gemm_version.hpp)
  bool cuda_graphs = false;      // replay each CUDA training step as a CUDA graph
  bool fused_head = false;       // fc2, the loss and their gradients in one CUDA kernel
  bool fused_step = false;       // the whole step in three CUDA kernels (implies the two above)
  bool pdl = false;              // the fused step with programmatic dependent launch (implies fused_step)
  bool persistent = false;       // the fused step's kernels as one persistent kernel (implies fused_step)
  int steps_per_graph = 1;  // consecutive steps replayed as one CUDA graph (above 1, implies cuda_graphs)
  bool tf32 = false;        // cuBLAS's products in TF32 on tensor cores (needs gemm cublas)
  // allreduce: every replica steps from the all-reduced gradient (the default); dataparallel:
  // nn.DataParallel's algorithm, device 0's parameters copied out every step
  // (host/training/data_parallel.hpp)
  std::string strategy = "allreduce";
  std::optional<std::filesystem::path> metrics;  // JSON lines, one record per logged step and per epoch
  ProgressMode progress = ProgressMode::Auto;
  bool explain = false;
  std::optional<std::filesystem::path> trace;  // Chrome trace of the first trace_steps steps
  long trace_steps = 50;
  std::optional<std::filesystem::path>
      save;  // checkpoint after every epoch, at the end, and on SIGINT/SIGTERM
  std::optional<std::filesystem::path> resume;     // continue a run from its checkpoint
  std::optional<std::filesystem::path> init_from;  // start from these parameters (also PyTorch's safetensors)
  std::string launcher =
      "auto";  // how the processes of a multi-process run find each other (host/processes/launch.hpp)
  bool listen_all = false;  // rank 0 of a TCP rendezvous listens on every interface, not MASTER_ADDR's alone
  double timeout_seconds = 300;  // how long a rank waits for the others before it gives up

  // The options given on the command line ("--lr"), as against those left at their defaults: a resumed run
  // takes the checkpoint's settings unless given, and the GPU-only options ignored on the CPU are named.
  std::set<std::string> given;
  bool is_given(std::string_view option) const;
};

struct EvalOptions {
  std::filesystem::path checkpoint;
  std::optional<std::filesystem::path> data;
  std::string device = "auto";
  std::string gemm = "blocked";
  bool json = false;  // also print the result as one JSON line, last
};

struct CommandLine {
  enum class Action { Train, Eval, Exit } action = Action::Exit;
  TrainOptions train;
  EvalOptions eval;
  std::string text;  // for Exit: what to print (help, version)
};

// A command line that cannot be run; the message says what is wrong and how to get help.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

CommandLine parse_command_line(int argc, const char* const* argv);

// Throws UsageError when the SGD settings cannot go together (as torch.optim.SGD refuses them).
void check_sgd_settings(const SgdConfig& sgd);

// "all" -> empty (every visible device); "0,1,3" -> {0, 1, 3}. Throws UsageError naming --devices.
std::vector<int> parse_device_list(const std::string& devices);

// Parses, runs, and turns every error into one message on stderr and a non-zero exit code.
int run_cli(int argc, const char* const* argv);

}  // namespace mnistdp
