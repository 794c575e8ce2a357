#pragma once
// mnist-dp-bench --epoch: whole training epochs of one replica on one GPU, side by side in nine variants:
// launched the plain way, replayed as CUDA graphs (CudaStepOptions::cuda_graphs), with the fused classifier
// head (CudaStepOptions::fused_head), with both, as the fused step (CudaStepOptions::fused_step: three
// kernels a step, in a graph), as the fused step with programmatic dependent launch
// (CudaStepOptions::programmatic_launch; compute capability 9.0+), that with 64 steps a graph
// (CudaStepOptions::steps_per_graph), and the persistent kernel (CudaStepOptions::persistent) with one step
// and with 64 steps a launch. What an epoch is timed as is what the
// trainer reports for it: from the start of its first step to the end of its last step on the device, with
// every step's gather, the all-reduce (NCCL, world size 1), and the host's shuffle and upload of the next
// epoch's order inside; the host never waits for the device within an epoch (no loss lines, no
// evaluation).
#include <string>
#include <vector>

namespace mnistdp::bench {

// The variants' names, in the order they run.
// "fused-step+pdl+64": the same, replaying 64 steps a graph (CudaStepOptions::steps_per_graph).
// "persistent", "persistent+64": the persistent kernel, one block an SM, running 1 and 64 steps a launch.
inline constexpr const char* kEpochVariants[] = {
    "plain",      "graphs",       "head", "head+graphs", "fused-step", "fused-step+pdl", "fused-step+pdl+64",
    "persistent", "persistent+64"};

struct EpochBenchOptions {
  int device = 0;
  int repeats = 10;  // timed epochs per variant and round, after two warm-up epochs
  int rounds = 3;    // every variant once per round, in turn: drift on the machine hits them alike
  int train_rows = 60000;
  std::string gemm = "blocked";
  bool tf32 = false;      // with gemm cublas: its products in TF32 (CudaStepOptions::tf32), in every variant
  std::string json_path;  // empty: no JSON
  // The variants to time, by name (kEpochVariants); empty: all of them.
  std::vector<std::string> variants;
  // At most this many steps an epoch: train_rows is cut to max_steps x 64 (0: train_rows as it is).
  int max_steps = 0;
  // Time nothing: one round of one epoch between the warm-up and cool-down ones (repeats and rounds are
  // ignored), the same check of the variants' parameters, and no time printed or written.
  bool check_only = false;
};

// Prints the table (and writes the JSON); returns the exit status: 0, 1 when the variants do not all end with
// the same parameters (cuBLAS aside), kExitNoGpu without a usable GPU (emulated devices are usable only with
// check_only).
int run_epoch_bench(const EpochBenchOptions& options);

}  // namespace mnistdp::bench
