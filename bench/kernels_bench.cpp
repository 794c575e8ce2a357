// mnist-dp-bench: times every CUDA kernel of a training step and every GEMM version, at the training shapes
// and on a sweep of larger sizes, beside cuBLAS, against ceilings measured in the same run. Each version is
// checked against the CPU reference (mnistdp::ref) before it is timed; one that disagrees is reported FAIL
// and not timed.
//
//   mnist-dp-bench [--quick] [--filter TEXT] [--json FILE] [--device N] [--repeats N] [--list] [--check-only]
//   mnist-dp-bench --epoch [--epoch-gemm NAME] [--epoch-steps N] [--rounds N] [--repeats N] [--json FILE]
//                  [--device N] [--check-only]
//
// --epoch times whole training epochs instead, launched the plain way and replayed as CUDA graphs
// (epoch_bench.hpp). --check-only runs every selected benchmark with its checks, each mode launched as few
// times as the timing allows, and reports no time: a rehearsal of a GPU run, which emulated devices may take.
//
// Exit status: 0 when every check passed, 1 when one failed or a call failed, 77 when no GPU is usable.
// docs/benchmarks.md says what each column means.
#include <CLI/CLI.hpp>

#include "bench/epoch_bench.hpp"
#include "bench/kernels/runner.hpp"

namespace mnistdp::bench {
namespace {

constexpr int kTrainBatches[] = {64, 32, 22, 8};  // one replica's rows of 64 over 1, 2, 3 and 8 GPUs

void run_all(Runner& runner, const Options& o) {
  for (const int batch : kTrainBatches) {
    for (const GemmCase& g : training_gemms(batch))
      runner.gemm_case(g);
    runner.kernel_cases(batch);
  }
  runner.sgd_cases();
  for (const int batch : kTrainBatches)
    runner.step_cases(batch);
  for (const GemmCase& g : sweep_gemms(o.quick))
    runner.gemm_case(g);
}

int run(int argc, char** argv) {
  Options o;
  CLI::App app{
      "mnist-dp-bench: every CUDA kernel and GEMM version of mnist-dp, at the training shapes and larger, "
      "beside "
      "cuBLAS and against ceilings measured in the same run. Each is checked against the CPU reference "
      "first."};
  app.add_flag("--quick", o.quick, "Fewer repeats and sweep sizes (about a quarter of the time)");
  app.add_option("--filter", o.filter, "Only benchmarks whose id (group/op/impl, see --list) contains this");
  app.add_option("--json", o.json_path,
                 "Also write every row, the ceilings and the machine to this JSON file");
  app.add_option("--device", o.device, "CUDA device index")->check(CLI::NonNegativeNumber);
  app.add_option("--repeats", o.repeats, "Timings per mode (default 25, 7 with --quick)")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--list", o.list, "List the benchmark ids (no GPU needed) and exit");
  app.add_flag("--epoch", o.epoch,
               "Time whole training epochs instead, launched the plain way and replayed as CUDA graphs");
  app.add_option("--epoch-gemm", o.epoch_gemm, "With --epoch: the matrix product (" + gemm_names_text() + ")")
      ->check(CLI::IsMember(gemm_names()))
      ->capture_default_str();
  bool epoch_tf32 = false;
  app.add_flag("--epoch-tf32", epoch_tf32, "With --epoch --epoch-gemm cublas: cuBLAS's products in TF32");
  std::string epoch_variants;
  app.add_option("--epoch-variants", epoch_variants,
                 fmt::format("With --epoch: the variants to time, comma-separated, of {} (default: all)",
                             fmt::join(kEpochVariants, ", ")))
      ->check([](const std::string& list) {
        for (const std::string& name : split_commas(list))
          if (std::find_if(std::begin(kEpochVariants), std::end(kEpochVariants),
                           [&](const char* v) { return name == v; }) == std::end(kEpochVariants))
            return fmt::format("'{}' is not a variant ({})", name, fmt::join(kEpochVariants, ", "));
        return std::string();
      });
  app.add_option("--rounds", o.rounds, "With --epoch: rounds, each variant once per round")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--epoch-steps", o.epoch_steps,
                 "With --epoch: at most N steps an epoch (a training set of N x 64 random rows; default: "
                 "60,000 rows, 938 steps)")
      ->check(CLI::Range(1, 1000000));
  app.add_flag(
      "--check-only", o.check_only,
      "Time nothing: set up every selected benchmark, check it as a timed run does (a failed check "
      "still exits 1), launch each mode as few times as the timing allows, and print no time (the "
      "JSON says \"check_only\": true and has no times). A rehearsal of a GPU run: runs on emulated "
      "devices too. --repeats and --rounds are ignored (--epoch: one round, one epoch in place of the "
      "timed ones; --epoch-steps keeps it short)");
  CLI11_PARSE(app, argc, argv);
  if (o.epoch_steps > 0 && !o.epoch)
    throw std::invalid_argument("--epoch-steps: only with --epoch (the kernel rows have no epochs)");

  if (o.epoch) {
    EpochBenchOptions e;
    e.device = o.device;
    if (o.repeats > 0) e.repeats = o.repeats;
    e.rounds = o.rounds;
    e.max_steps = o.epoch_steps;
    e.check_only = o.check_only;
    e.gemm = o.epoch_gemm;
    e.json_path = o.json_path;
    e.variants = split_commas(epoch_variants);
    e.tf32 = epoch_tf32;
    return run_epoch_bench(e);
  }

  if (o.list) {
    // Listing needs no device: the ids come from the same case tables the runner uses.
    for (const int batch : kTrainBatches) {
      for (const GemmCase& g : training_gemms(batch))
        for (const ImplChoice& c : impls_for(g))
          if (o.filter.empty() || (g.group + "/" + g.op + "/" + c.name).find(o.filter) != std::string::npos)
            fmt::print("{}/{}/{}\n", g.group, g.op, c.name);
      for (const char* id : {"fc1.db/column_sums", "fc2.db/column_sums", "softmax_xent/fused",
                             "mark_correct/argmax", "gather/normalize"}) {
        const std::string full = fmt::format("train-b{}/{}", batch, id);
        if (o.filter.empty() || full.find(o.filter) != std::string::npos) fmt::print("{}\n", full);
      }
    }
    for (const char* id : {"kernel/sgd/plain", "kernel/sgd/momentum0.9"})
      if (o.filter.empty() || std::string(id).find(o.filter) != std::string::npos) fmt::print("{}\n", id);
    for (const int batch : kTrainBatches)
      for (const StepVariant& variant : kStepVariants) {
        const std::string full = fmt::format("step-b{}/step/{}", batch, variant.name());
        if (o.filter.empty() || full.find(o.filter) != std::string::npos) fmt::print("{}\n", full);
      }
    for (const GemmCase& g : sweep_gemms(o.quick))
      for (const ImplChoice& c : impls_for(g))
        if (o.filter.empty() || (g.group + "/" + g.op + "/" + c.name).find(o.filter) != std::string::npos)
          fmt::print("{}/{}/{}\n", g.group, g.op, c.name);
    return 0;
  }

  std::string why;
  const int devices = usable_devices(why, o.check_only);
  if (devices == 0) return report_no_gpu(kProgram, why, "The CPU ops have mnist-dp-cpu-bench.");
  if (o.device >= devices)
    throw std::invalid_argument(
        fmt::format("--device {}: this machine has {} CUDA device(s)", o.device, devices));

  Runner runner(o, o.device);
  const nlohmann::json dev = device_json(o.device);
  if (o.check_only) {
    fmt::print("{} --check-only on {} (cc {}, {} SMs), CUDA runtime {}: {}.\n", kProgram,
               dev["name"].get<std::string>(), dev["compute_capability"].get<std::string>(),
               dev["sm_count"].get<int>(), dev["cuda_runtime"].get<std::string>(), check_only_note());
    fmt::print(
        "Each row: its check against the CPU reference, then each of its modes (hot, cold over 2 buffer "
        "sets, graph) launched untimed.\n\n");
  } else {
    fmt::print("{} on {} (cc {}, {} SMs, L2 {} MiB), CUDA runtime {}, driver API {}; host load {:.2f}\n",
               kProgram, dev["name"].get<std::string>(), dev["compute_capability"].get<std::string>(),
               dev["sm_count"].get<int>(), dev["l2_bytes"].get<std::size_t>() >> 20,
               dev["cuda_runtime"].get<std::string>(), dev["cuda_driver_api"].get<std::string>(),
               load_average());
    fmt::print(
        "Median over repeats of (event time of N back-to-back launches) / N. hot: the same buffers each "
        "launch (as in training,\nwhere everything lives in L2); cold: buffers rotated over twice the L2; "
        "graph: the N launches in one CUDA graph.\nRates and ceiling fractions from the hot time (the cold "
        "one where there is no hot). xlaunch: time / (launches x empty-kernel launch).\n\n");
  }
  runner.measure_ceilings();
  runner.print_ceilings();
  runner.print_header();
  run_all(runner, o);
  if (runner.count() == 0) fmt::print("no benchmark matches --filter '{}' (see --list)\n", o.filter);
  if (!o.json_path.empty()) {
    write_json(o.json_path, runner.json(o));
    fmt::print("\nwrote {}\n", o.json_path);
  }
  if (!runner.all_ok()) {
    std::fprintf(stderr, "%s: some checks failed or calls failed: see the check column\n", kProgram);
    return 1;
  }
  if (o.check_only && runner.count() > 0)
    fmt::print("\n{} rows checked, nothing timed{}\n", runner.count(),
               devices_emulated() ? " (emulated devices)" : "");
  return 0;
}

}  // namespace
}  // namespace mnistdp::bench

int main(int argc, char** argv) {
  try {
    return mnistdp::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mnist-dp-bench: %s\n", e.what());
    return 1;
  }
}
