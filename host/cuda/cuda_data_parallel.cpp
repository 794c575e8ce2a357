#include "host/cuda/cuda_data_parallel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "host/cuda/device_replica.hpp"
#include "host/model/params.hpp"
#include "host/training/trace.hpp"
#include "kernels/cuda/ops/replica_sum.hpp"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/memory.hpp"

namespace mnistdp {
namespace {

using L = ParamLayout;

// The order of one step, s_r being replica r's stream (r >= 1), s_0 replica 0's, and [e] a record of event e:
//
//   s_0: SGD (the step before), [params_ready]
//   s_r: wait(params_ready), params_0 -> params_r, forward, [forward_done_r]
//   s_0: forward, wait(forward_done_r) for all r, logits and labels of every shard -> batch buffers,
//        the batch's loss, [loss_done]
//   s_r: wait(loss_done), batch d(logits) rows -> dlogits_r, backward, [backward_done_r]
//   s_0: d(logits) rows -> dlogits_0, backward, wait(backward_done_r) for all r, grads_r -> staging_r,
//        grads_0 += staging_1 + ... (in replica order), SGD
//
// Each copy that reads another stream's result waits for that stream's event; each buffer a copy reads is
// written again only after the copy, in the order of the stream the copy runs on or through the next step's
// params_ready (s_r's next forward, which overwrites logits_r, comes after it).
class CudaDataParallelLinks final : public DataParallelLinks {
 public:
  explicit CudaDataParallelLinks(std::vector<DeviceReplica> replicas) : replicas_(std::move(replicas)) {
    const DeviceGuard guard;
    CUDA_CHECK(cudaSetDevice(root().device));
    const std::size_t n = replicas_.size();
    params_ready_.emplace(cudaEventDisableTiming);
    loss_done_.emplace(cudaEventDisableTiming);
    for (std::size_t r = 1; r < n; ++r)
      staging_.emplace_back(L::kCount);
    // An event is recorded on a stream of the device it was made on: replica r's on device r.
    for (std::size_t r = 1; r < n; ++r) {
      CUDA_CHECK(cudaSetDevice(replicas_[r].device));
      forward_done_.emplace_back(cudaEventDisableTiming);
      backward_done_.emplace_back(cudaEventDisableTiming);
    }
    CUDA_CHECK(cudaSetDevice(root().device));
    // The sum's operands, replica 0's gradients first: their addresses never move (a replica allocates its
    // gradient buffer once, and the staging buffers are made here).
    std::vector<const float*> table{root().replica->gradient_buffer()};
    for (const DeviceBuffer<float>& s : staging_)
      table.push_back(s.data());
    sum_table_ = DeviceBuffer<const float*>(n);
    CUDA_CHECK(cudaMemcpyAsync(sum_table_.data(), table.data(), sum_table_.bytes(), cudaMemcpyHostToDevice,
                               root().stream));
    CUDA_CHECK(cudaStreamSynchronize(root().stream));  // the host table goes out of scope
  }

  ~CudaDataParallelLinks() override {
    // The buffers here are read by work still queued on replica 0's stream. Never throws.
    const DeviceGuard guard;
    if (cudaSetDevice(root().device) != cudaSuccess || cudaStreamSynchronize(root().stream) != cudaSuccess)
      static_cast<void>(cudaGetLastError());
  }
  CudaDataParallelLinks(const CudaDataParallelLinks&) = delete;
  CudaDataParallelLinks& operator=(const CudaDataParallelLinks&) = delete;

  std::string description() const override {
    return fmt::format("nn.DataParallel's copies between {} CUDA replica{} (device 0: cuda:{})",
                       replicas_.size(), replicas_.size() == 1 ? "" : "s", root().device);
  }

  void trace_steps(long steps) override {
    const DeviceGuard guard;
    traced_.clear();
    anchors_.clear();
    trace_remaining_ = steps;
    if (steps <= 0) return;
    // Each device's events are timed against an anchor of that device whose host time is known (as a
    // replica's own marks are): the host reads its clock as soon as the anchor has completed.
    for (const DeviceReplica& r : replicas_) {
      if (anchors_.count(r.device)) continue;
      CUDA_CHECK(cudaSetDevice(r.device));
      Anchor& a = anchors_[r.device];
      a.event.emplace(cudaEventDefault);
      a.event->record(r.stream);
      a.event->synchronize();
      a.us = trace_clock_us();
    }
  }

  std::vector<LinkStepMarks> take_trace() override {
    const DeviceGuard guard;
    std::vector<LinkStepMarks> steps;
    for (const TracedStep& t : traced_) {
      LinkStepMarks& marks = steps.emplace_back();
      marks.fill(0.0);
      for (const Stamp& stamp : t.stamps) {
        CUDA_CHECK(cudaSetDevice(stamp.device));
        stamp.event.synchronize();
        const Anchor& a = anchors_.at(stamp.device);
        const double us = a.us + 1000.0 * stamp.event.elapsed_ms_since(*a.event);
        double& mark = marks[static_cast<std::size_t>(stamp.mark)];
        mark = std::max(mark, us);  // a mark on several streams: the last of them
      }
    }
    traced_.clear();
    trace_remaining_ = 0;
    return steps;
  }

  void broadcast_parameters() override {
    const DeviceGuard guard;
    if (trace_remaining_ > 0) traced_.emplace_back();
    CUDA_CHECK(cudaSetDevice(root().device));
    stamp(LinkMark::broadcast, root());
    if (replicas_.size() == 1) stamp(LinkMark::broadcast_end, root());
    params_ready_->record(root().stream);
    const float* master = root().replica->shard_buffers(0).params;
    for (std::size_t r = 1; r < replicas_.size(); ++r) {
      const DeviceReplica& to = replicas_[r];
      float* params = to.replica->shard_buffers(0).params;
      CUDA_CHECK(cudaSetDevice(to.device));
      CUDA_CHECK(cudaStreamWaitEvent(to.stream, params_ready_->get(), 0));
      CUDA_CHECK(cudaMemcpyPeerAsync(params, to.device, master, root().device, L::kCount * sizeof(float),
                                     to.stream));
      stamp(LinkMark::broadcast_end, to);
    }
  }

  void gather_and_take_loss(std::span<const Shard> shards, int rows, int global_batch) override {
    const DeviceGuard guard;
    for (std::size_t r = 1; r < replicas_.size(); ++r) {
      CUDA_CHECK(cudaSetDevice(replicas_[r].device));
      forward_done_[r - 1].record(replicas_[r].stream);
    }
    CUDA_CHECK(cudaSetDevice(root().device));
    reserve(rows);
    for (std::size_t r = 1; r < replicas_.size(); ++r)
      CUDA_CHECK(cudaStreamWaitEvent(root().stream, forward_done_[r - 1].get(), 0));
    stamp(LinkMark::gather, root());
    for (std::size_t r = 0; r < replicas_.size(); ++r) {
      const Shard& s = shards[r];
      if (s.count == 0) continue;
      const Replica::ShardBuffers b = replicas_[r].replica->shard_buffers(s.count);
      CUDA_CHECK(cudaSetDevice(root().device));  // shard_buffers makes its replica's device current
      const auto at = static_cast<std::size_t>(s.first);
      const auto count = static_cast<std::size_t>(s.count);
      CUDA_CHECK(cudaMemcpyPeerAsync(logits_.data() + at * L::kClasses, root().device, b.logits,
                                     replicas_[r].device, count * L::kClasses * sizeof(float),
                                     root().stream));
      CUDA_CHECK(cudaMemcpyPeerAsync(labels_.data() + at, root().device, b.labels, replicas_[r].device, count,
                                     root().stream));
    }
    stamp(LinkMark::loss, root());
    root().replica->batch_loss(logits_.data(), labels_.data(), dlogits_.data(), rows, global_batch);
  }

  void scatter_dlogits(std::span<const Shard> shards) override {
    const DeviceGuard guard;
    CUDA_CHECK(cudaSetDevice(root().device));
    stamp(LinkMark::scatter, root());
    stamp(LinkMark::scatter_end, root());  // the end is the last copy's, no earlier than this
    loss_done_->record(root().stream);
    for (std::size_t r = 0; r < replicas_.size(); ++r) {
      const Shard& s = shards[r];
      if (s.count == 0) continue;
      const DeviceReplica& to = replicas_[r];
      float* dlogits = to.replica->shard_buffers(s.count).dlogits;
      CUDA_CHECK(cudaSetDevice(to.device));
      if (r > 0) CUDA_CHECK(cudaStreamWaitEvent(to.stream, loss_done_->get(), 0));
      CUDA_CHECK(cudaMemcpyPeerAsync(
          dlogits, to.device, dlogits_.data() + static_cast<std::size_t>(s.first) * L::kClasses,
          root().device, static_cast<std::size_t>(s.count) * L::kClasses * sizeof(float), to.stream));
      stamp(LinkMark::scatter_end, to);
    }
  }

  void reduce_gradients() override {
    const std::size_t n = replicas_.size();
    const DeviceGuard guard;
    for (std::size_t r = 1; r < n; ++r) {
      CUDA_CHECK(cudaSetDevice(replicas_[r].device));
      backward_done_[r - 1].record(replicas_[r].stream);
    }
    CUDA_CHECK(cudaSetDevice(root().device));
    for (std::size_t r = 1; r < n; ++r)
      CUDA_CHECK(cudaStreamWaitEvent(root().stream, backward_done_[r - 1].get(), 0));
    stamp(LinkMark::reduce, root());
    for (std::size_t r = 1; r < n; ++r) {
      CUDA_CHECK(cudaMemcpyPeerAsync(staging_[r - 1].data(), root().device,
                                     replicas_[r].replica->gradient_buffer(), replicas_[r].device,
                                     L::kCount * sizeof(float), root().stream));
    }
    CUDA_CHECK(cudaSetDevice(root().device));
    // The parameters' slots only: replica 0's loss slot holds the batch's loss.
    if (n > 1)
      cuda::sum_in_order(sum_table_.data(), static_cast<int>(n), root().replica->gradient_buffer(), L::kCount,
                         root().stream);
    stamp(LinkMark::reduce_end, root());
    if (trace_remaining_ > 0) --trace_remaining_;
  }

 private:
  const DeviceReplica& root() const { return replicas_[0]; }

  // While steps are traced: a timed event for mark `m` on `at`'s stream (made on, and leaving current, its
  // device).
  void stamp(LinkMark m, const DeviceReplica& at) {
    if (trace_remaining_ <= 0) return;
    CUDA_CHECK(cudaSetDevice(at.device));
    Stamp& s = traced_.back().stamps.emplace_back(Stamp{m, at.device, Event(cudaEventDefault)});
    s.event.record(at.stream);
  }

  // The batch buffers on device 0 (current), grown to `rows`: once the stream is done with the old ones.
  void reserve(int rows) {
    if (rows <= rows_) return;
    CUDA_CHECK(cudaStreamSynchronize(root().stream));
    const auto n = static_cast<std::size_t>(rows);
    logits_ = DeviceBuffer<float>(n * L::kClasses);
    labels_ = DeviceBuffer<std::uint8_t>(n);
    dlogits_ = DeviceBuffer<float>(n * L::kClasses);
    rows_ = rows;
  }

  std::vector<DeviceReplica> replicas_;
  int rows_ = 0;
  DeviceBuffer<float> logits_;                // [rows, 10] on device 0
  DeviceBuffer<std::uint8_t> labels_;         // [rows]
  DeviceBuffer<float> dlogits_;               // [rows, 10]
  std::vector<DeviceBuffer<float>> staging_;  // [replicas - 1][kCount]: replica r's gradients on device 0
  DeviceBuffer<const float*> sum_table_;      // [replicas]: replica 0's gradients, then the staging buffers
  std::optional<Event> params_ready_;
  std::optional<Event> loss_done_;
  std::vector<Event> forward_done_;   // [replicas - 1]
  std::vector<Event> backward_done_;  // [replicas - 1]

  // The timeline: each traced step's stamps, timed against each device's anchor.
  struct Stamp {
    LinkMark mark;
    int device;
    Event event;
  };
  struct TracedStep {
    std::vector<Stamp> stamps;
  };
  struct Anchor {
    std::optional<Event> event;
    double us = 0.0;
  };
  long trace_remaining_ = 0;
  std::vector<TracedStep> traced_;
  std::map<int, Anchor> anchors_;  // by device
};

}  // namespace

std::unique_ptr<DataParallelLinks> make_cuda_data_parallel_links(std::span<Replica* const> replicas) {
  return std::make_unique<CudaDataParallelLinks>(device_replicas(replicas, "DataParallel links"));
}

}  // namespace mnistdp
