#include "host/cuda/graph_step.hpp"

#include <algorithm>
#include <iterator>
#include <memory>

#include "kernels/cuda/ops/step_cursor.hpp"

namespace mnistdp {
namespace {

bool same_sgd(const SgdConfig& a, const SgdConfig& b) {
  return a.lr == b.lr && a.momentum == b.momentum && a.dampening == b.dampening &&
         a.weight_decay == b.weight_decay && a.nesterov == b.nesterov;
}

}  // namespace

void GraphStepLaunch::compute_gradients(int first, int count, int global_batch) {
  launch_queued();  // queued whole steps come first
  if (count == 0) {
    step_.zero_gradients();
    return;
  }
  StepShape shape;
  shape.count = count;
  shape.global_batch = global_batch;
  run_graphed(shape, first, [&] { step_.gradients(first, count, global_batch, /*from_cursor=*/true); });
}

void GraphStepLaunch::sgd_step(const SgdConfig& cfg, bool first_step) {
  launch_queued();
  step_.sgd(cfg, first_step);
}

bool GraphStepLaunch::step_alone(int first, int count, const SgdConfig& cfg) {
  StepShape shape;
  shape.count = count;
  shape.global_batch = count;
  shape.whole_step = true;
  shape.sgd = cfg;
  take_whole_step(shape, first);
  return true;
}

void GraphStepLaunch::take_whole_step(const StepShape& shape, int first) {
  launch_queued();  // steps queued before this one (by a way that queues) come first
  run_graphed(shape, first, [&] { enqueue_whole_steps(shape); });
}

void GraphStepLaunch::enqueue_whole_steps(const StepShape& shape) {
  const bool fused = step_.fused_step_takes(shape.count);
  for (int i = 0; i < shape.steps; ++i) {
    if (fused) {
      step_.fused_step(shape.count, shape.global_batch, shape.sgd);
      continue;
    }
    step_.gradients(/*first=*/0, shape.count, shape.global_batch, /*from_cursor=*/true);
    step_.sgd(shape.sgd, /*first_step=*/false);
  }
}

bool GraphStepLaunch::same_shape(const StepShape& a, const StepShape& b) {
  return a.count == b.count && a.global_batch == b.global_batch && a.whole_step == b.whole_step &&
         (!a.whole_step || (same_sgd(a.sgd, b.sgd) && a.steps == b.steps));
}

bool GraphStepLaunch::has_graph(const StepShape& shape) const {
  return std::any_of(graphs_.begin(), graphs_.end(),
                     [&](const StepGraph& g) { return g.exec && same_shape(g.shape, shape); });
}

void GraphStepLaunch::run_graphed(const StepShape& shape, int first, const std::function<void()>& enqueue,
                                  bool warmed_up) {
  const cudaStream_t s = step_.stream();
  auto found = std::find_if(graphs_.begin(), graphs_.end(),
                            [&](const StepGraph& g) { return same_shape(g.shape, shape); });
  const bool launch_by_launch = found == graphs_.end() && !warmed_up;
  if (found == graphs_.end()) {
    if (graphs_.size() >= kMaxGraphs) graphs_.clear();
    graphs_.push_back(StepGraph{shape, std::nullopt});
    found = std::prev(graphs_.end());
  }
  if (!launch_by_launch && !found->exec) {
    const CudaGraph graph = capture_graph(s, enqueue);
    found->exec.emplace(graph);
    found->exec->upload(s);
    ++counts_.captured;
  }
  if (cursor_host_ != first) cuda::set_cursor(step_.buffers().cursor, first, s);
  cursor_host_ = -1;  // unknown until the launches have been accepted
  if (launch_by_launch) {
    // The kernels the graph will hold, launched one by one: whatever is set up on first use (modules,
    // cuBLAS's workspace) is then in place before the capture, which would refuse it. The next step of this
    // shape is captured.
    enqueue();
    ++counts_.plain;
  } else {
    found->exec->launch(s);
    ++counts_.replayed;
  }
  cursor_host_ = first + shape.steps * shape.global_batch;
}

std::unique_ptr<StepLaunch> make_graph_step_launch(CudaStep& step, const StepLaunchSettings& /*settings*/) {
  return std::make_unique<GraphStepLaunch>(step);
}

}  // namespace mnistdp
