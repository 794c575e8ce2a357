#include "host/training/trainer.hpp"

#include <fmt/format.h>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <stdexcept>

#include "host/model/init.hpp"
#include "host/model/params.hpp"

namespace mnistdp {

Trainer::Trainer(std::vector<std::unique_ptr<Replica>> replicas, std::unique_ptr<Strategy> strategy,
                 int train_count, TrainConfig config, ProcessGroup* group)
    : replicas_(std::move(replicas)),
      strategy_(std::move(strategy)),
      workers_(static_cast<int>(replicas_.size())),
      train_count_(train_count),
      config_(config),
      group_(group),
      world_replicas_(static_cast<int>(replicas_.size()) * (group ? group->size() : 1)),
      first_replica_(static_cast<int>(replicas_.size()) * (group ? group->rank() : 0)) {
  if (replicas_.empty()) throw std::invalid_argument("Trainer: no replicas");
  if (!strategy_) throw std::invalid_argument("Trainer: no strategy");
  if (train_count_ <= 0) throw std::invalid_argument("Trainer: the training set is empty");
  if (config_.batch_size <= 0) throw std::invalid_argument("Trainer: batch size must be positive");
  if (config_.accumulate <= 0)
    throw std::invalid_argument("Trainer: the micro-batches a step accumulates must be at least 1");
  if (group_ && !strategy_->across_processes())
    throw std::invalid_argument(fmt::format("Trainer: {} runs in one process", strategy_->description()));
  if (config_.check_replicas > 0 && !strategy_->every_replica_steps())
    throw std::invalid_argument(
        "Trainer: under DataParallel only replica 0 keeps parameters between steps; there is no agreement to "
        "check");
  for (auto& r : replicas_)
    replica_ptrs_.push_back(r.get());
  broadcast_parameters();
}

Trainer::Trainer(std::vector<std::unique_ptr<Replica>> replicas, std::unique_ptr<Communicator> communicator,
                 int train_count, TrainConfig config, ProcessGroup* group)
    : Trainer(std::move(replicas), communicator ? make_all_reduce_strategy(std::move(communicator)) : nullptr,
              train_count, config, group) {}

Trainer::Trainer(std::vector<std::unique_ptr<Replica>> replicas, std::unique_ptr<DataParallelLinks> links,
                 int train_count, TrainConfig config)
    : Trainer(std::move(replicas), links ? make_data_parallel_strategy(std::move(links)) : nullptr,
              train_count, config) {}

void Trainer::broadcast_parameters() {
  std::vector<float> params(ParamLayout::kCount);
  replicas_[0]->store_parameters(params);
  if (group_) {
    group_->broadcast(std::as_writable_bytes(std::span(params)));
    replicas_[0]->load_parameters(params);
  }
  for (std::size_t r = 1; r < replicas_.size(); ++r)
    replicas_[r]->load_parameters(params);
}

bool Trainer::stop_before_step(TrainListener& listener) {
  const bool wanted = listener.stop_requested();
  return group_ ? group_->any(wanted) : wanted;
}

void Trainer::step(int first, int rows) {
  strategy_->step({replica_ptrs_, workers_, world_replicas_, first_replica_},
                  {first, rows, config_.batch_size}, config_.sgd);
}

std::vector<int> Trainer::traced_micro_batches() const {
  std::vector<int> micro;
  if (config_.accumulate == 1) return micro;
  const int per_epoch = steps_per_epoch();
  // No more than the run has steps: --trace-steps may ask for more.
  long end = static_cast<long>(config_.epochs) * per_epoch;
  if (config_.max_steps > 0) end = std::min(end, config_.max_steps);
  end = std::min(end, config_.start_step + config_.trace_steps);
  for (long s = config_.start_step; s < end; ++s) {
    const int first = static_cast<int>(s % per_epoch) * step_rows();
    micro.push_back(
        StepRows{first, std::min(step_rows(), train_count_ - first), config_.batch_size}.micro_batches());
  }
  return micro;
}

void Trainer::check_replicas_agree(long step) const {
  if (world_replicas_ < 2) return;
  // Reading the parameters waits for the device; an all-reduce across processes must be watched while it
  // finishes (a lost peer would otherwise hold that wait forever).
  strategy_->await_completion();
  std::vector<float> reference(ParamLayout::kCount);
  replicas_[0]->store_parameters(reference);
  // Across processes: every rank compares its replicas with rank 0's replica 0, and all learn whether any
  // differed; the ranks that did name the parameter.
  std::string local_difference;
  if (group_) {
    group_->broadcast(std::as_writable_bytes(std::span(reference)));
    try {
      check_against(reference, step, 0);
    } catch (const ReplicaDivergence& e) {
      local_difference = e.what();
    }
    if (group_->any(!local_difference.empty())) {
      if (!local_difference.empty()) throw ReplicaDivergence(local_difference);
      throw ReplicaDivergence(
          fmt::format("after step {}, a replica on another rank differs from rank 0's "
                      "(that rank names the parameter)",
                      step));
    }
    return;
  }
  check_against(reference, step, 1);
}

void Trainer::check_against(std::span<const float> reference, long step, std::size_t first) const {
  std::vector<float> other(ParamLayout::kCount);
  const std::string where = group_ ? fmt::format(" on rank {}", group_->rank()) : "";
  for (std::size_t r = first; r < replicas_.size(); ++r) {
    replicas_[r]->store_parameters(other);
    for (std::size_t i = 0; i < ParamLayout::kCount; ++i) {
      // Compared as bits: the replicas must agree exactly, and a NaN must not compare unequal to itself.
      if (std::memcmp(&reference[i], &other[i], sizeof(float)) != 0)
        throw ReplicaDivergence(
            fmt::format("after step {}, replica {}{} ({}) differs from replica 0{} at {}: {} against {}; the "
                        "replicas no longer compute the same update",
                        step, r, where, replicas_[r]->description(), group_ ? " of rank 0" : "",
                        parameter_name(i), other[i], reference[i]));
    }
  }
}

std::vector<std::vector<StepMarks>> Trainer::take_trace() {
  std::vector<std::vector<StepMarks>> marks;
  for (auto& replica : replicas_)
    marks.push_back(replica->take_trace());
  return marks;
}

std::vector<LinkStepMarks> Trainer::take_link_trace() {
  return strategy_->take_link_trace();
}

std::vector<EpochReport> Trainer::run(TrainListener& listener) {
  using Clock = std::chrono::steady_clock;
  std::vector<EpochReport> reports;
  const int steps = steps_per_epoch();
  long total_steps = config_.start_step;
  if (config_.trace_steps > 0) {
    // A replica's timeline, and DataParallel's copies, record each micro-batch as a step of its own.
    const std::vector<int> micro = traced_micro_batches();
    const long micro_batches =
        micro.empty() ? config_.trace_steps : std::accumulate(micro.begin(), micro.end(), 0L);
    for (auto& replica : replicas_)
      replica->trace_steps(micro_batches);
    strategy_->trace_steps(micro_batches);
  }

  // A resumed run starts inside the epoch it stopped in; each epoch's order depends only on the seed and the
  // epoch, so the rest of that epoch sees exactly the rows it would have seen.
  // Every replica makes it itself, a GPU replica on its device.
  auto give_order = [&](int epoch) {
    for (auto& replica : replicas_)
      replica->make_epoch_order(config_.seed, epoch);
  };
  auto step_budget_spent = [&] { return config_.max_steps > 0 && total_steps >= config_.max_steps; };
  // max_steps reached at an epoch's end is the run's end: no empty epoch follows. The run's first epoch
  // always begins, so that a resumed run with no step left still reports (and saves, and evaluates) where it
  // stands.
  const int first_epoch = static_cast<int>(total_steps / steps);
  // Where reading the loss costs nothing, every step's is checked, so that a divergence is named at the step
  // it happened. A device checks every step's loss itself and keeps the first bad step; the host reads that
  // record with the loss of the log lines and at the epoch's end, which wait for the device anyway.
  const bool every_step = replicas_[0]->loss_on_host();
  bool recorded = !every_step;
  for (auto& replica : replicas_)
    recorded = replica->watch_losses(total_steps) && recorded;
  long last_finite = total_steps - 1;
  // At a wait for the devices: the first bad step, named exactly where the replica recorded it; otherwise
  // the loss just read, of step i of the epoch.
  auto check_loss = [&](float loss, int epoch, int i) {
    if (recorded) check_recorded(listener);
    check_finite(loss, epoch, i, last_finite, listener);
    last_finite = total_steps - 1;
  };
  for (int epoch = first_epoch; epoch < config_.epochs && (epoch == first_epoch || !step_budget_spent());
       ++epoch) {
    const auto start = Clock::now();
    // Every later epoch's order was given during the epoch before (below).
    if (epoch == first_epoch) give_order(epoch);

    EpochReport report{epoch, 0, 0, 0.0, {}, true, 0};
    for (int i = static_cast<int>(total_steps - static_cast<long>(epoch) * steps); i < steps; ++i) {
      if (step_budget_spent() || stop_before_step(listener)) {
        report.complete = false;
        break;
      }
      const int first = i * step_rows();
      const int rows = std::min(step_rows(), train_count_ - first);
      step(first, rows);
      ++total_steps;
      if (config_.check_replicas > 0 && total_steps % config_.check_replicas == 0)
        check_replicas_agree(total_steps);
      ++report.steps;
      report.samples += rows;
      const bool log_line = config_.log_interval > 0 && i % config_.log_interval == 0;
      if (log_line || every_step) {
        strategy_->await_completion();
        const float loss = replicas_[0]->loss_sum() / static_cast<float>(rows);
        check_loss(loss, epoch, i);
        if (log_line) listener.on_step_loss({epoch, i, loss});
      }
      listener.on_step(epoch, i, steps);
    }
    // The next epoch's order, queued while the devices still run this epoch's queued steps: a GPU replica
    // sorts it on the device behind them, so nothing waits, or makes the device wait, at the epoch boundary.
    const bool next_epoch_starts = report.complete && epoch + 1 < config_.epochs && !step_budget_spent();
    if (next_epoch_starts) give_order(epoch + 1);
    // loss_sum() waits for the replica's device: the epoch ends when every replica has finished its last
    // step, and evaluation, which waits too, stays out of the epoch time.
    strategy_->await_completion();
    for (auto& replica : replicas_)
      replica->loss_sum();
    report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    report.total_steps = total_steps;
    if (report.steps > 0 && last_finite < total_steps - 1)
      check_loss(replicas_[0]->loss_sum(), epoch,
                 static_cast<int>(total_steps - 1 - static_cast<long>(epoch) * steps));
    if (config_.evaluate && is_root()) report.test = replicas_[0]->evaluate();
    listener.on_epoch_end(report);
    reports.push_back(report);
    if (!report.complete) break;
  }
  return reports;
}

std::string loss_text(float loss) {
  if (std::isnan(loss)) return "nan";
  return fmt::format("{}", loss);
}

void Trainer::check_recorded(TrainListener& listener) const {
  const std::optional<NonFiniteLoss> bad = replicas_[0]->first_nonfinite_loss();
  if (!bad) return;
  const int steps = steps_per_epoch();
  const int epoch = static_cast<int>(bad->step / steps);
  const int step = static_cast<int>(bad->step % steps);
  const int rows = std::min(step_rows(), train_count_ - step * step_rows());
  // Every step up to the bad one was checked on the device and found finite.
  check_finite(bad->loss_sum / static_cast<float>(rows), epoch, step, bad->step - 1, listener);
}

void Trainer::check_finite(float loss, int epoch, int step, long last_finite, TrainListener& listener) const {
  if (std::isfinite(loss)) return;
  listener.on_diverged({epoch, step, loss});
  const long this_step = static_cast<long>(epoch) * steps_per_epoch() + step;
  const std::string first =
      last_finite == this_step - 1
          ? std::string("the first step whose loss is not finite")
          : fmt::format(
                "the first step checked since {}; this replica's loss is read only at the log lines, and "
                "--log-interval 1 names the first step whose loss is not finite",
                last_finite < 0 ? std::string("the start")
                                : fmt::format("step {} in all, whose loss was finite", last_finite));
  throw TrainingDiverged(fmt::format(
      "the loss became {} at epoch {}, step {} ({}): training diverged (a smaller --lr may help); "
      "the last checkpoint, if any, was written before this and is left as it was",
      loss_text(loss), epoch, step, first));
}

}  // namespace mnistdp
