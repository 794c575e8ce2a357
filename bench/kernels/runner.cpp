// Runner: the timing of one benchmark after its check, and the buffers and data sets the benchmarks share.
#include "bench/kernels/runner.hpp"

namespace mnistdp::bench {

Runner::Runner(const Options& o, int device) : opt_(o), device_(device) {
  CUDA_CHECK(cudaSetDevice(device));
  l2_ = l2_bytes(device);
  stream_.emplace();
  cublas_.emplace(stream_->get());
  timing_.repeats = o.repeats > 0 ? o.repeats : (o.quick ? 7 : 25);
  timing_.target_ms = o.quick ? 1.0 : 2.0;
  if (o.check_only) timing_ = kCheckOnlyTiming;
}

bool Runner::selected(const std::string& id) const {
  return opt_.filter.empty() || id.find(opt_.filter) != std::string::npos;
}

void Runner::run(const Bench& b) {
  Result r(b);
  try {
    const Check c = b.validate();
    r.error_ratio = c.ratio;
    if (!c.ok) r.check = "FAIL: " + c.detail;
  } catch (const std::exception& e) {
    r.check = std::string("ERROR: ") + e.what();
  }
  if (r.check == "ok") {
    // A check-only run launches each mode the same way, and keeps no figure of it.
    auto timed = [&](const char* mode, std::optional<Stats>& slot, const std::function<Stats()>& f) {
      try {
        const Stats st = f();
        if (!opt_.check_only) slot = st;
        r.launched.emplace_back(mode);
      } catch (const std::exception& e) {
        r.check = std::string("ERROR: ") + e.what();
      }
    };
    const cudaStream_t s = stream_->get();
    if (b.hot) timed("hot", r.hot, [&] { return time_stream(b.hot, s, timing_); });
    if (b.cold) timed("cold", r.cold, [&] { return time_stream(b.cold, s, timing_); });
    if (b.graph && b.hot) timed("graph", r.graph, [&] { return time_graph(b.hot, s, timing_); });
  }
  print_row(r);
  results_.push_back(std::move(r));
}

int Runner::rotation_sets(std::size_t set_bytes) const {
  if (set_bytes >= 2 * l2_) return 1;
  const std::size_t want = (2 * l2_ + set_bytes - 1) / set_bytes;
  const int sets = static_cast<int>(std::clamp<std::size_t>(want, 1, (std::size_t{1} << 30) / set_bytes));
  return std::min(sets, max_sets());
}

void Runner::with_rotation(Bench& b, const LaunchFn& launch, int sets) {
  b.hot = [launch](long) { launch(0); };
  if (sets > 1) b.cold = [launch, sets](long i) { launch(i % sets); };
  b.sets = sets;
  b.graph = true;
}

std::vector<std::uint8_t> Runner::random_labels(int n) {
  std::mt19937 rng(seed_++);
  std::vector<std::uint8_t> labels(sz(n));
  for (auto& l : labels)
    l = static_cast<std::uint8_t>(rng() % kOut);
  return labels;
}

std::shared_ptr<Runner::TrainingSet> Runner::training_set() {
  if (training_set_) return training_set_;
  auto t = std::make_shared<TrainingSet>();
  std::mt19937 rng(12345);
  t->host_images.resize(sz(kTrainImages) * kIn);
  for (auto& p : t->host_images)
    p = static_cast<std::uint8_t>(rng() >> 24);
  t->host_labels = random_labels(kTrainImages);
  t->host_order.resize(kTrainImages);
  std::iota(t->host_order.begin(), t->host_order.end(), 0);
  std::shuffle(t->host_order.begin(), t->host_order.end(), rng);
  t->images = DeviceBuffer<std::uint8_t>(t->host_images.size());
  t->labels = DeviceBuffer<std::uint8_t>(t->host_labels.size());
  t->order = DeviceBuffer<std::int32_t>(t->host_order.size());
  to_device(t->images.data(), t->host_images);
  to_device(t->labels.data(), t->host_labels);
  to_device(t->order.data(), t->host_order);
  training_set_ = t;
  return t;
}

}  // namespace mnistdp::bench
