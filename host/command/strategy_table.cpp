#include "host/command/strategy_table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "host/command/explain.hpp"
#include "host/command/replica_setup.hpp"
#ifdef MNISTDP_WITH_CUDA
#include "host/cuda/cuda_communicators.hpp"
#endif

namespace mnistdp {

bool all_on_one_device(const Placement& placement) {
  const std::vector<int>& d = placement.replica_devices;
  return std::all_of(d.begin(), d.end(), [&](int device) { return device == d.front(); });
}

namespace {

std::unique_ptr<Strategy> make_all_reduce(const StrategyParts& p) {
  return make_all_reduce_strategy(make_communicator(p.placement, p.replicas, p.group, p.timeout));
}

std::unique_ptr<Strategy> make_data_parallel(const StrategyParts& p) {
  return make_data_parallel_strategy(make_data_parallel_links(p.placement, p.replicas));
}

// The communicators with the two halves: the in-process sum over CPU replicas, and the same-device sum over
// the replicas of one GPU (a lone replica of any kind has nothing to sum).
std::unique_ptr<Strategy> make_zero1(const StrategyParts& p) {
  if (p.group) throw std::invalid_argument("ZeRO-1 runs in one process");
  if (!p.placement.gpu || p.replicas.size() == 1) return make_zero1_strategy(make_host_communicator());
  if (!all_on_one_device(p.placement))
    throw std::invalid_argument(
        "ZeRO-1 on CUDA replicas takes the replicas of one GPU: its collectives are "
        "the same-device sum's");
#ifdef MNISTDP_WITH_CUDA
  std::vector<Replica*> raw;
  for (const auto& r : p.replicas)
    raw.push_back(r.get());
  return make_zero1_strategy(make_same_device_communicator(raw));
#else
  throw std::logic_error("CUDA replicas in a build without CUDA");
#endif
}

}  // namespace

const std::array<StrategyEntry, 3> kStrategies{
    StrategyEntry{"allreduce", "DistributedDataParallel",
                  "each replica takes its shard's loss, one all-reduce of the gradients, every replica steps",
                  "host/training/all_reduce.cpp", true, true, true, true, "all-reduce: {}",
                  &explain_first_step, &make_all_reduce},
    StrategyEntry{"dataparallel", "nn.DataParallel",
                  "device 0 gathers the logits, takes the loss, reduces the gradients and alone steps, its "
                  "parameters copied to every replica before each step",
                  "host/training/data_parallel.cpp", false, false, false, true,
                  "strategy: nn.DataParallel's, device 0 steps alone; {}", &explain_data_parallel_step,
                  &make_data_parallel},
    StrategyEntry{"zero1", "ZeroRedundancyOptimizer (ZeRO stage 1)",
                  "the gradients reduce-scattered, each replica steps its shard of the parameters and keeps "
                  "that shard's momentum alone, then the parameters all-gathered",
                  "host/training/zero1.cpp", false, false, true, false,
                  "strategy: ZeRO-1, the optimiser state sharded over the replicas; {}", &explain_zero1_step,
                  &make_zero1},
};

const StrategyEntry& strategy_entry(std::string_view name) {
  for (const StrategyEntry& row : kStrategies)
    if (name == row.name) return row;
  throw std::invalid_argument(fmt::format("no strategy is called '{}'", name));
}

std::vector<std::string> strategy_names() {
  std::vector<std::string> names;
  for (const StrategyEntry& row : kStrategies)
    names.emplace_back(row.name);
  return names;
}

std::string strategy_help() {
  std::string help = "How the replicas share a step:";
  for (std::size_t i = 0; i < kStrategies.size(); ++i) {
    const StrategyEntry& row = kStrategies[i];
    const char* separator = i == 0 ? "" : (i + 1 == kStrategies.size() ? " or" : ",");
    help += fmt::format("{} {} ({}'s: {})", separator, row.name, row.torch, row.summary);
  }
  return help + "; the same parameters";
}

}  // namespace mnistdp
