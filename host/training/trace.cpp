#include "host/training/trace.hpp"

#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>

namespace mnistdp {

namespace {

struct PhaseBounds {
  const char* name;
  Mark begin;
  Mark end;
  bool once_a_step = false;  // after the last micro-batch of an accumulated step only
};

constexpr PhaseBounds kAllReducePhases[] = {
    {"gather", Mark::gather, Mark::forward},
    {"forward", Mark::forward, Mark::loss},
    {"loss", Mark::loss, Mark::backward},
    {"backward", Mark::backward, Mark::backward_end},
    {"all-reduce", Mark::backward_end, Mark::sgd, true},
    {"sgd", Mark::sgd, Mark::sgd_end, true},
};

// Under DataParallel a replica's "loss" span runs from the end of its forward pass to the start of its
// backward pass: device 0 gathers the logits, takes the loss and scatters d(logits) meanwhile.
constexpr PhaseBounds kDataParallelPhases[] = {
    {"gather", Mark::gather, Mark::forward},
    {"forward", Mark::forward, Mark::loss},
    {"to device 0 and back (gather, loss, scatter)", Mark::loss, Mark::backward},
    {"backward", Mark::backward, Mark::backward_end},
    {"reduce onto device 0", Mark::backward_end, Mark::sgd},
    {"sgd", Mark::sgd, Mark::sgd_end, true},
};

// ZeRO-1: the replica's wait for the reduce-scatter, and its SGD step on its shard alone.
constexpr PhaseBounds kZero1Phases[] = {
    {"gather", Mark::gather, Mark::forward},
    {"forward", Mark::forward, Mark::loss},
    {"loss", Mark::loss, Mark::backward},
    {"backward", Mark::backward, Mark::backward_end},
    {"reduce-scatter (and waiting for it)", Mark::backward_end, Mark::sgd, true},
    {"sgd on its shard", Mark::sgd, Mark::sgd_end, true},
};

struct LinkPhaseBounds {
  const char* name;
  LinkMark begin;
  LinkMark end;
  bool once_a_step = false;
};

constexpr LinkPhaseBounds kZero1LinkPhases[] = {
    {"reduce-scatter gradients", LinkMark::reduce, LinkMark::reduce_end, true},
    {"all-gather parameters", LinkMark::broadcast, LinkMark::broadcast_end, true},
};

constexpr LinkPhaseBounds kLinkPhases[] = {
    {"broadcast parameters", LinkMark::broadcast, LinkMark::broadcast_end},
    {"gather logits", LinkMark::gather, LinkMark::loss},
    {"loss on device 0", LinkMark::loss, LinkMark::scatter},
    {"scatter d(logits)", LinkMark::scatter, LinkMark::scatter_end},
    {"reduce gradients", LinkMark::reduce, LinkMark::reduce_end},
};

// Which step, and which of its micro-batches, the k-th recorded entry of a timeline is.
struct EntryStep {
  long step;
  int micro_batch;
  bool last;  // the step's last micro-batch
};

class EntrySteps {
 public:
  EntrySteps(long first_step, std::span<const int> micro_batches)
      : first_step_(first_step), micro_batches_(micro_batches) {}
  EntryStep operator()(std::size_t entry) const {
    if (micro_batches_.empty()) return {first_step_ + static_cast<long>(entry), 0, true};
    std::size_t k = entry;
    for (std::size_t s = 0; s < micro_batches_.size(); ++s) {
      const auto n = static_cast<std::size_t>(micro_batches_[s]);
      if (k < n) return {first_step_ + static_cast<long>(s), static_cast<int>(k), k + 1 == n};
      k -= n;
    }
    throw std::logic_error(
        fmt::format("write_chrome_trace: entry {} beyond the traced steps' micro-batches", entry));
  }
  bool accumulated() const {
    for (int n : micro_batches_)
      if (n > 1) return true;
    return false;
  }

 private:
  long first_step_;
  std::span<const int> micro_batches_;
};

nlohmann::json span(const char* name, std::size_t row, double begin, double end, const EntryStep& at,
                    bool accumulated) {
  nlohmann::json args{{"step", at.step}};
  if (accumulated) args["micro-batch"] = at.micro_batch;
  return {{"name", name},
          {"cat", "step"},
          {"ph", "X"},
          {"pid", 0},
          {"tid", row},
          {"ts", begin},
          {"dur", end > begin ? end - begin : 0.0},
          {"args", args}};
}

nlohmann::json row_name(std::size_t row, const std::string& name) {
  return {{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", row}, {"args", {{"name", name}}}};
}

}  // namespace

void write_chrome_trace(const std::filesystem::path& path,
                        const std::vector<std::vector<StepMarks>>& replica_marks,
                        const std::vector<std::string>& names, long first_step, TraceStrategy strategy,
                        const std::vector<LinkStepMarks>& link_marks, std::span<const int> micro_batches,
                        const TraceRun* run) {
  const EntrySteps entry_step(first_step, micro_batches);
  const bool accumulated = entry_step.accumulated();
  // Times start at the first mark of the run, so the numbers a reader sees are small.
  double origin = 0;
  bool have_origin = false;
  for (const auto& steps : replica_marks)
    for (const StepMarks& m : steps)
      if (!have_origin || m[0] < origin) {
        origin = m[0];
        have_origin = true;
      }

  const bool zero1 = strategy == TraceStrategy::zero1;
  // ZeRO-1's entries before a step's last micro-batch hold no collective, and no mark.
  for (const LinkStepMarks& m : link_marks) {
    const double first = zero1 ? m[static_cast<std::size_t>(LinkMark::reduce)] : m[0];
    if (zero1 && first == 0.0) continue;
    if (!have_origin || first < origin) {
      origin = first;
      have_origin = true;
    }
  }

  const std::span<const PhaseBounds> phases = strategy == TraceStrategy::dataparallel
                                                  ? std::span<const PhaseBounds>(kDataParallelPhases)
                                              : zero1 ? std::span<const PhaseBounds>(kZero1Phases)
                                                      : std::span<const PhaseBounds>(kAllReducePhases);
  const std::span<const LinkPhaseBounds> link_phases =
      zero1 ? std::span<const LinkPhaseBounds>(kZero1LinkPhases)
            : std::span<const LinkPhaseBounds>(kLinkPhases);
  nlohmann::json events = nlohmann::json::array();
  for (std::size_t r = 0; r < replica_marks.size(); ++r) {
    events.push_back(row_name(r, fmt::format("replica {} ({})", r, r < names.size() ? names[r] : "?")));
    for (std::size_t step = 0; step < replica_marks[r].size(); ++step) {
      const StepMarks& m = replica_marks[r][step];
      const EntryStep at = entry_step(step);
      for (const PhaseBounds& p : phases)
        if (at.last || !p.once_a_step)
          events.push_back(span(p.name, r, m[static_cast<int>(p.begin)] - origin,
                                m[static_cast<int>(p.end)] - origin, at, accumulated));
    }
  }
  // DataParallel's copies, or ZeRO-1's collectives: a row below the replicas'.
  if (!link_marks.empty()) {
    const std::size_t row = replica_marks.size();
    events.push_back(
        row_name(row, zero1 ? "the collectives (ZeRO-1)" : "device 0's copies (nn.DataParallel)"));
    for (std::size_t step = 0; step < link_marks.size(); ++step) {
      const LinkStepMarks& m = link_marks[step];
      const EntryStep at = entry_step(step);
      for (const LinkPhaseBounds& p : link_phases)
        if (at.last || !p.once_a_step)
          events.push_back(span(p.name, row, m[static_cast<int>(p.begin)] - origin,
                                m[static_cast<int>(p.end)] - origin, at, accumulated));
    }
  }
  std::ofstream file(path, std::ios::out | std::ios::trunc);
  if (!file)
    throw std::runtime_error(fmt::format("{}: cannot open the trace file for writing", path.string()));
  nlohmann::json trace{{"traceEvents", events}, {"displayTimeUnit", "ns"}};
  // Trace viewers pass over keys they do not know.
  if (run)
    trace["mnist_dp"] = {{"strategy", strategy == TraceStrategy::dataparallel ? "dataparallel"
                                      : zero1                                 ? "zero1"
                                                                              : "allreduce"},
                         {"first_step", first_step},
                         {"replicas", replica_marks.size()},
                         {"world_replicas", run->world_replicas},
                         {"processes", run->processes},
                         {"batch_size", run->batch_size},
                         {"accumulate", run->accumulate},
                         {"train_count", run->train_count}};
  file << trace.dump() << '\n';
  if (!file.flush()) throw std::runtime_error(fmt::format("{}: write failed (disk full?)", path.string()));
}

}  // namespace mnistdp
