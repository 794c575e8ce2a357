#include "host/cuda/graph_step.hpp"

#include <algorithm>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <utility>

#include "kernels/cuda/ops/step_cursor.hpp"

namespace mnistdp {
namespace {

bool same_sgd(const SgdConfig& a, const SgdConfig& b) {
  return a.lr == b.lr && a.momentum == b.momentum && a.dampening == b.dampening &&
         a.weight_decay == b.weight_decay && a.nesterov == b.nesterov;
}

}  // namespace

void GraphStepLaunch::compute_gradients(int first, int count, int global_batch) {
  // The whole step, as one graph, once sgd_step knows its settings; queued steps stay queued only while
  // whole steps keep coming.
  const bool whole_step = !ops_.tracing() && owns_all_reduce() && count > 0;
  if (!whole_step) launch_queued();
  flush_pending();  // a step recorded and never stepped: its gradients first, in order
  if (count == 0) {
    ops_.zero_gradients();
    all_reduce_owed_ = owns_all_reduce();
    return;
  }
  // Before any capture: growing the activations drops the graphs that hold them.
  ops_.ensure_rows(count);
  if (ops_.tracing()) {
    ops_.enqueue_gradients(first, count, global_batch, /*from_cursor=*/false);
    all_reduce_owed_ = owns_all_reduce();
    return;
  }
  if (whole_step) {
    // A step flushed above without its SGD step owes no all-reduce any more: this one overwrites its
    // gradients.
    all_reduce_owed_ = false;
    pending_ = PendingStep{first, count, global_batch};
    return;
  }
  StepShape shape;
  shape.count = count;
  shape.global_batch = global_batch;
  run_graphed(shape, first,
              [&] { ops_.enqueue_gradients(first, count, global_batch, /*from_cursor=*/true); });
}

void GraphStepLaunch::sgd_step(const SgdConfig& cfg, bool first_step) {
  if (pending_ && !first_step) {
    const PendingStep p = *pending_;
    pending_.reset();
    StepShape shape;
    shape.count = p.count;
    shape.global_batch = p.global_batch;
    shape.whole_step = true;
    shape.sgd = cfg;
    take_whole_step(shape, p.first);
    return;
  }
  launch_queued();
  flush_pending();  // the first step with momentum: the plain way
  if (all_reduce_owed_) {
    all_reduce_owed_ = false;
    all_reduce_(ops_.stream());
  }
  ops_.enqueue_sgd(cfg, first_step);
}

void GraphStepLaunch::take_whole_step(const StepShape& shape, int first) {
  launch_queued();
  run_graphed(shape, first, [&] { enqueue_whole_steps(shape); });
}

void GraphStepLaunch::flush() {
  launch_queued();
  flush_pending();
}

void GraphStepLaunch::enqueue_whole_steps(const StepShape& shape) {
  // Owning the all-reduce means world size 1, where it is the identity (NCCL enqueues nothing for an
  // in-place sum over one rank): the fused step leaves it out.
  const bool fused = ops_.fused_step_takes(shape.count);
  for (int i = 0; i < shape.steps; ++i) {
    if (fused) {
      ops_.enqueue_fused_step(shape.count, shape.global_batch, shape.sgd);
      continue;
    }
    ops_.enqueue_gradients(/*first=*/0, shape.count, shape.global_batch, /*from_cursor=*/true);
    all_reduce_(ops_.stream());
    ops_.enqueue_sgd(shape.sgd, false);
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

void GraphStepLaunch::flush_pending() {
  if (!pending_) return;
  launch_queued();  // queued before it
  const PendingStep p = *pending_;
  pending_.reset();
  ops_.enqueue_gradients(p.first, p.count, p.global_batch, /*from_cursor=*/false);
  all_reduce_owed_ = owns_all_reduce();
}

void GraphStepLaunch::run_graphed(const StepShape& shape, int first, const std::function<void()>& enqueue,
                                  bool warmed_up) {
  const cudaStream_t s = ops_.stream();
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
  if (cursor_host_ != first) cuda::set_cursor(ops_.cursor(), first, s);
  cursor_host_ = -1;  // unknown until the launches have been accepted
  if (launch_by_launch) {
    // The kernels the graph will hold, launched one by one: whatever is set up on first use (modules,
    // NCCL's connections, cuBLAS's workspace) is then in place before the capture, which would refuse it.
    // The next step of this shape is captured.
    enqueue();
    ++counts_.plain;
  } else {
    found->exec->launch(s);
    ++counts_.replayed;
  }
  cursor_host_ = first + shape.steps * shape.global_batch;
}

void GraphStepLaunch::adopt_all_reduce(AllReduceFn all_reduce) {
  if (holds_steps() || all_reduce_owed_)
    throw std::logic_error(
        "adopt_all_reduce: a step is in progress (between compute_gradients and sgd_step, or queued)");
  refuse_adoption();
  // Graphs captured before hold no all-reduce; whole-step shapes are captured anew.
  graphs_.clear();
  all_reduce_ = std::move(all_reduce);
}

void GraphStepLaunch::release_all_reduce() noexcept {
  if (!all_reduce_) return;
  // Launched before the all-reduce goes: a recorded step owes its gradients. Then every graph that holds the
  // all-reduce must have finished before it is dropped.
  try {
    ops_.activate();
    launch_queued();
    if (pending_) flush_pending();
    if (all_reduce_owed_) all_reduce_(ops_.stream());
  } catch (...) {
    static_cast<void>(cudaGetLastError());
  }
  // Whatever failed above, the graphs may be dropped only once the stream has finished with them.
  try {
    ops_.wait_for_stream();
  } catch (...) {
    static_cast<void>(cudaGetLastError());
  }
  pending_.reset();
  forget_queue();
  all_reduce_owed_ = false;
  graphs_.clear();
  all_reduce_ = nullptr;
}

std::unique_ptr<StepLaunch> make_graph_step_launch(StepOps& ops) {
  return std::make_unique<GraphStepLaunch>(ops);
}

}  // namespace mnistdp
