#pragma once
// The runner of mnist-dp-bench's rows: it measures the ceilings, then checks and times each benchmark and
// keeps its result for the table and the JSON. Its members are defined by what they measure: runner.cpp (the
// timing of one benchmark, the buffers it rotates), ceilings.cpp, op_cases.cpp (the GEMMs and the other
// kernels of a step), step_cases.cpp (whole steps), report.cpp (the table and the JSON).
#include "bench/kernels/cases.hpp"

namespace mnistdp::bench {

class Runner {
 public:
  Runner(const Options& o, int device);

  bool selected(const std::string& id) const;

  // With --check-only, each ceiling is launched at a small size (kCheckOnlySgemm, ...), a few times, untimed.
  void measure_ceilings();

  // Runs (or, with --list, names) one benchmark; the check first, then each timing mode it has.
  void run(const Bench& b);

  void gemm_case(const GemmCase& g);

  // The kernels of a step other than the products, at per-replica batch `batch`.
  void kernel_cases(int batch);

  // The SGD step over the flat parameter buffer (independent of the batch).
  void sgd_cases();

  // A whole training step of one replica with `batch` rows (of a global batch of 64), built from the
  // project's launchers as CudaReplica does: gather, fc1 and fc2 forward, softmax cross-entropy, fc2 and fc1
  // backward, SGD; with the fused head (impl name "+head"), fc1 forward, the head, fc1's weight gradient;
  // the fused step ("fused-step"), its three kernels, also with programmatic dependent launch
  // ("fused-step+pdl"), and as the persistent kernel ("persistent", one step a launch). No all-reduce
  // (allreduce_bench times that).
  void step_cases(int batch);

  void print_ceilings() const;

  void print_header() const;

  // With --check-only: "check_only": true, every row without a time (the modes launched instead), and no
  // ceilings or persistent phases.
  nlohmann::json json(const Options& o) const;

  bool all_ok() const;
  std::size_t count() const { return results_.size(); }

 private:
  // How many buffer sets of `set_bytes` make a working set of twice the L2 (1 when one set already is).
  int rotation_sets(std::size_t set_bytes) const;

  // The most buffer sets a cold mode rotates over. A check-only run times nothing, so the L2 need not be
  // defeated: two sets take the rotation's path, and spare an emulated device filling twice the L2 each case.
  int max_sets() const { return opt_.check_only ? 2 : std::numeric_limits<int>::max(); }

  static void with_rotation(Bench& b, const LaunchFn& launch, int sets);

  std::vector<std::uint8_t> random_labels(int n);

  // A training set of random pixels and labels (MNIST's size), on the device and on the host, with one
  // epoch's order; made once and shared.
  struct TrainingSet {
    std::vector<std::uint8_t> host_images, host_labels;
    std::vector<std::int32_t> host_order;
    DeviceBuffer<std::uint8_t> images, labels;
    DeviceBuffer<std::int32_t> order;
    DeviceBuffer<float> x{sz(kGlobalBatch) * kIn};
    DeviceBuffer<std::uint8_t> y{kGlobalBatch};
  };
  std::shared_ptr<TrainingSet> training_set();

  static Work step_work(int batch, GemmImpl impl);

  // The persistent kernel with kPhaseSteps steps a launch, on the rows of steps 0 to 63 every time: its
  // device time per step (time_stream, as every row is timed), and how a step divides among its three phases
  // (the phase timer of cuda::PersistentStepArgs in one more launch: block 0's SM clock, each phase with the
  // barrier after it), those shares applied to the step's median time.
  void persistent_phases(CudaStep& step, int batch, const SgdConfig& sgd);

  void print_row(const Result& r);

  Options opt_;
  int device_;
  std::size_t l2_ = 0;
  std::optional<Stream> stream_;
  std::optional<CublasHandle> cublas_;
  TimingConfig timing_;
  Ceilings ceil_;
  nlohmann::json persistent_phases_ = nlohmann::json::array();  // one entry a persistent_phases run
  std::vector<Result> results_;
  std::shared_ptr<TrainingSet> training_set_;
  std::uint32_t seed_ = 100;
  std::string last_group_;
};

}  // namespace mnistdp::bench
