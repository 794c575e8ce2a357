#include "host/cpu/cpu_replica.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "kernels/cpu/gather.hpp"
#include "kernels/cpu/linear.hpp"
#include "kernels/cpu/softmax_xent.hpp"
#include "kernels/ref/softmax_xent.hpp"

namespace mnistdp {

namespace {

constexpr int kIn = ParamLayout::kInput;
constexpr int kHid = ParamLayout::kHidden;
constexpr int kOut = ParamLayout::kClasses;
// Evaluation runs in chunks this large: big enough for BLAS to be efficient, small enough to stay in cache.
constexpr int kEvalChunk = 500;

void check_size(std::size_t got, std::size_t want, const char* what) {
  if (got != want)
    throw std::invalid_argument(fmt::format("{}: expected {} values, got {}", what, want, got));
}

}  // namespace

CpuReplica::CpuReplica(const DataSplits& data, int index, int threads, Activation activation)
    : data_(data),
      index_(index),
      isa_(cpu::best_isa()),
      activation_(activation),
      params_(ParamLayout::kCount),
      grads_(ParamLayout::kGradCount),
      fc2_dwT_(static_cast<std::size_t>(kHid) * kOut),
      team_(threads) {
  inputs_.resize(static_cast<std::size_t>(team_.size()));
}

std::string CpuReplica::description() const {
  return team_.size() == 1 ? fmt::format("cpu:{}", index_)
                           : fmt::format("cpu:{} ({} threads)", index_, team_.size());
}

void CpuReplica::load_parameters(std::span<const float> params) {
  check_size(params.size(), ParamLayout::kCount, "load_parameters");
  std::copy(params.begin(), params.end(), params_.begin());
}

void CpuReplica::store_parameters(std::span<float> params) {
  check_size(params.size(), ParamLayout::kCount, "store_parameters");
  std::copy(params_.begin(), params_.end(), params.begin());
}

void CpuReplica::load_momentum(std::span<const float> momentum) {
  if (momentum.empty()) {  // no buffer yet, as before a first step with momentum
    momentum_.clear();
    has_momentum_ = false;
    return;
  }
  check_size(momentum.size(), ParamLayout::kCount, "load_momentum");
  const auto first = momentum.begin() + static_cast<std::ptrdiff_t>(shard_.first());
  momentum_.assign(first, first + static_cast<std::ptrdiff_t>(shard_.count()));
  has_momentum_ = true;
}

void CpuReplica::store_momentum(std::span<float> momentum) {
  check_size(momentum.size(), ParamLayout::kCount, "store_momentum");
  if (!has_momentum_) throw std::logic_error("store_momentum: no momentum buffer yet");
  std::copy(momentum_.begin(), momentum_.end(),
            momentum.begin() + static_cast<std::ptrdiff_t>(shard_.first()));
}

void CpuReplica::make_epoch_order(std::uint64_t seed, int epoch) {
  order_.resize(static_cast<std::size_t>(data_.train.count));
  epoch_order(order_, seed, epoch);
}

void CpuReplica::set_epoch_order(std::span<const std::int32_t> order) {
  check_size(order.size(), static_cast<std::size_t>(data_.train.count), "set_epoch_order");
  for (std::int32_t row : order)
    if (row < 0 || row >= data_.train.count)
      throw std::out_of_range(
          fmt::format("set_epoch_order: row {} outside the training set of {} rows", row, data_.train.count));
  order_.assign(order.begin(), order.end());
}

void CpuReplica::reserve_rows(int rows) {
  if (rows <= capacity_rows_) return;
  const auto n = static_cast<std::size_t>(rows);
  for (Inputs& in : inputs_) {
    in.x.resize(n * kIn);
    in.xT.resize(n * kIn);
    in.y.resize(n);
  }
  hiddenT_.resize(n * kHid);
  if (keeps_pre_activation(activation_)) preactT_.resize(n * kHid);
  logitsT_.resize(n * kOut);
  logits_.resize(n * kOut);
  dlogits_.resize(n * kOut);
  dlogitsT_.resize(n * kOut);
  row_loss_.resize(n);
  dhiddenT_.resize(n * kHid);
  ones_.assign(n, 1.0f);
  capacity_rows_ = rows;
}

void CpuReplica::forward(const float* xT, int rows, cpu::Part part) {
  const auto p = ParamViews<const float>::of(params_.data());
  cpu::linear_forward(isa_, p.fc1_weight, p.fc1_bias, xT, hiddenT_.data(), {rows, kIn, kHid}, activation_,
                      keeps_pre_activation(activation_) ? preactT_.data() : nullptr, part);
  team_.barrier();
  // fc2's ten rows are too few to split: it is split by columns, the members' shares of the batch.
  cpu::linear_forward_by_columns(isa_, p.fc2_weight, p.fc2_bias, hiddenT_.data(), logitsT_.data(),
                                 {rows, kHid, kOut}, Activation::identity, nullptr, part);
}

void CpuReplica::compute_gradients(int first, int count, int global_batch) {
  gradients(first, count, global_batch, /*fused_sgd=*/nullptr);
}

bool CpuReplica::step_alone(int first, int count, const SgdConfig& cfg) {
  if (cfg.momentum != 0.0f) return false;
  gradients(first, count, count, &cfg);
  return true;
}

void CpuReplica::check_rows(int first, int count, const char* who) const {
  if (first < 0 || count < 0 ||
      static_cast<std::size_t>(first) + static_cast<std::size_t>(count) > order_.size())
    throw std::out_of_range(fmt::format("{}: rows [{}, {}) outside the epoch of {} rows", who, first,
                                        first + count, order_.size()));
}

void CpuReplica::backward(int count, cpu::Part part, const cpu::WeightUpdate* fc1_update) {
  const auto p = ParamViews<const float>::of(params_.data());
  const auto g = ParamViews<float>::of(grads_.data());
  const LinearShape fc1{count, kIn, kHid}, fc2{count, kHid, kOut};
  // fc2's input is at hand only feature-major, so its weight gradient is made transposed, a small [256, 10]
  // result to turn, rather than from the hidden activations turned by rows.
  cpu::weight_gradient_from_transposed(isa_, hiddenT_.data(), dlogits_.data(), ones_.data(), fc2_dwT_.data(),
                                       g.fc2_weight, g.fc2_bias, fc2, part);
  cpu::input_gradient(isa_, p.fc2_weight, dlogitsT_.data(), hiddenT_.data(), preactT_.data(),
                      dhiddenT_.data(), fc2, activation_, part);
  // No barrier: this part's rows of dhiddenT_, just written, are the rows fc1's weight gradient reads here.
  const Inputs& in = inputs_[static_cast<std::size_t>(part.index)];
  cpu::weight_gradient(isa_, dhiddenT_.data(), in.x.data(), ones_.data(), g.fc1_weight, g.fc1_bias, fc1, part,
                       fc1_update);
}

void CpuReplica::gradients(int first, int count, int global_batch, const SgdConfig* fused_sgd) {
  check_rows(first, count, "compute_gradients");
  if (global_batch < 1 || count > global_batch)
    throw std::invalid_argument(
        fmt::format("compute_gradients: global batch {} for a shard of {} rows", global_batch, count));
  reserve_rows(std::max(count, 1));
  team_.run([&](int member) {
    const cpu::Part part{member, team_.size()};
    const bool lead = member == 0;  // marks the timeline and does the few small serial pieces
    if (lead) timeline_.mark(Mark::gather);
    Inputs& in = inputs_[static_cast<std::size_t>(member)];
    cpu::gather_normalize(isa_, data_.train.images.data(), data_.train.labels.data(), order_.data() + first,
                          in.x.data(), in.xT.data(), in.y.data(), count, kIn);
    if (lead) timeline_.mark(Mark::forward);
    forward(in.xT.data(), count, part);

    if (lead) timeline_.mark(Mark::loss);
    // On the same share of the batch as fc2's forward product: no barrier between them.
    cpu::softmax_xent(logitsT_.data(), in.y.data(), dlogits_.data(), dlogitsT_.data(), row_loss_.data(),
                      count, kOut, 1.0f / static_cast<float>(global_batch), part);
    team_.barrier();
    if (lead) {
      double loss_sum = 0.0;  // in row order, as ref::softmax_xent sums it
      for (int r = 0; r < count; ++r)
        loss_sum += static_cast<double>(row_loss_[static_cast<std::size_t>(r)]);
      grads_[ParamLayout::kLossSlot] = static_cast<float>(loss_sum);
      timeline_.mark(Mark::backward);
    }
    const cpu::WeightUpdate fc1_update{params_.data() + ParamLayout::kFc1Weight,
                                       fused_sgd != nullptr ? fused_sgd->lr : 0.0f,
                                       fused_sgd != nullptr ? fused_sgd->weight_decay : 0.0f};
    backward(count, part, fused_sgd != nullptr ? &fc1_update : nullptr);
    // The rows of this replica's next step, fetched into this core's cache while this step computes: the
    // training set is larger than the cache, and an image's 13 cache lines would otherwise each wait on
    // memory in the gather.
    const std::size_t next = static_cast<std::size_t>(first) + static_cast<std::size_t>(global_batch);
    for (int r = 0; r < count && next + static_cast<std::size_t>(r) < order_.size(); ++r) {
      const std::uint8_t* image = data_.train.images.data() +
                                  static_cast<std::size_t>(order_[next + static_cast<std::size_t>(r)]) * kIn;
      for (int byte = 0; byte < kIn; byte += 64)
        __builtin_prefetch(image + byte, /*rw=*/0, /*locality=*/2);
    }
    if (fused_sgd == nullptr) return;
    // The SGD step on the parameters fc1's weight gradient did not update (its bias and fc2, 2,826 values),
    // once every member's gradients are in: too few to split, and within the task it costs a barrier rather
    // than another start of the team.
    team_.barrier();
    if (!lead) return;
    timeline_.mark(Mark::backward_end);
    timeline_.mark(Mark::sgd);
    const std::size_t begin = ParamLayout::kFc1Bias;
    ref::sgd_step(params_.data() + begin, grads_.data() + begin, /*momentum=*/nullptr,
                  ParamLayout::kCount - begin, *fused_sgd, /*first_step=*/false);
  });
  if (fused_sgd == nullptr) {
    timeline_.mark(Mark::backward_end);
  } else {
    timeline_.mark(Mark::sgd_end);
  }
}

void CpuReplica::sgd_step(const SgdConfig& cfg) {
  shard_.require_whole();
  sgd(cfg, 0, ParamLayout::kCount);
}

void CpuReplica::sgd_step_shard(const SgdConfig& cfg, std::size_t first, std::size_t count) {
  // Momentum loaded before the shard was named (a resumed run) is cut down to it.
  if (shard_.name(first, count) && has_momentum_)
    momentum_.assign(momentum_.begin() + static_cast<std::ptrdiff_t>(first),
                     momentum_.begin() + static_cast<std::ptrdiff_t>(first + count));
  sgd(cfg, first, first + count);
}

void CpuReplica::sgd(const SgdConfig& cfg, std::size_t begin, std::size_t end) {
  const bool use_momentum = cfg.momentum != 0.0f;
  const bool first_step = use_momentum && !has_momentum_;
  if (first_step) momentum_.resize(shard_.count());
  timeline_.mark(Mark::sgd);
  const std::size_t n = end - begin;
  team_.run([&](int member) {
    const cpu::Range mine = cpu::share(static_cast<int>(n), {member, team_.size()}, 16);
    const std::size_t at = begin + static_cast<std::size_t>(mine.begin);
    ref::sgd_step(params_.data() + at, grads_.data() + at,
                  use_momentum ? momentum_.data() + (at - shard_.first()) : nullptr,
                  static_cast<std::size_t>(mine.end - mine.begin), cfg, first_step);
  });
  has_momentum_ = has_momentum_ || use_momentum;
  timeline_.mark(Mark::sgd_end);
}

Replica::ShardBuffers CpuReplica::shard_buffers(int rows) {
  reserve_rows(std::max(rows, 1));
  return {params_.data(), logits_.data(), inputs_.front().y.data(), dlogits_.data()};
}

void CpuReplica::forward_logits(int first, int count) {
  check_rows(first, count, "forward_logits");
  reserve_rows(std::max(count, 1));
  if (count == 0) {  // the step's marks all the same
    for (Mark m : {Mark::gather, Mark::forward, Mark::loss})
      timeline_.mark(m);
    return;
  }
  team_.run([&](int member) {
    const bool lead = member == 0;
    if (lead) timeline_.mark(Mark::gather);
    Inputs& in = inputs_[static_cast<std::size_t>(member)];
    cpu::gather_normalize(isa_, data_.train.images.data(), data_.train.labels.data(), order_.data() + first,
                          in.x.data(), in.xT.data(), in.y.data(), count, kIn);
    if (lead) timeline_.mark(Mark::forward);
    forward(in.xT.data(), count, {member, team_.size()});
  });
  // By rows, as DataParallel gathers them (feature-major logits would need every shard to be turned).
  cpu::transpose(isa_, logitsT_.data(), logits_.data(), kOut, count);
  // The logits handed over: the "loss" span, device 0's, begins.
  timeline_.mark(Mark::loss);
}

void CpuReplica::batch_loss(const float* logits, const std::uint8_t* labels, float* dlogits, int rows,
                            int global_batch) {
  // ref::softmax_xent_row on each row, as cpu::softmax_xent, and the losses summed in double in row order.
  grads_[ParamLayout::kLossSlot] =
      ref::softmax_xent(logits, labels, dlogits, rows, kOut, 1.0f / static_cast<float>(global_batch));
}

void CpuReplica::add_kept_gradients() {
  if (kept_grads_.size() != grads_.size())
    throw std::logic_error("add_kept_gradients: no gradients kept (keep_gradients first)");
  // kept + new, as sum_into_first adds a replica's buffer to the sum so far.
  for (std::size_t i = 0; i < grads_.size(); ++i)
    grads_[i] = kept_grads_[i] + grads_[i];
}

void CpuReplica::backward_from_dlogits(int count) {
  timeline_.mark(Mark::backward);
  if (count == 0) {
    std::fill(grads_.begin(), grads_.begin() + ParamLayout::kCount, 0.0f);
  } else {
    // reserve_rows has sized every buffer for these rows in forward_logits.
    cpu::transpose(isa_, dlogits_.data(), dlogitsT_.data(), count, kOut);
    team_.run([&](int member) { backward(count, {member, team_.size()}, nullptr); });
  }
  timeline_.mark(Mark::backward_end);
}

float CpuReplica::loss_sum() {
  return grads_[ParamLayout::kLossSlot];
}

EvalResult CpuReplica::evaluate() {
  const Dataset& test = data_.test;
  reserve_rows(std::min(kEvalChunk, std::max(test.count, 1)));
  std::vector<std::int32_t> rows(static_cast<std::size_t>(std::min(kEvalChunk, test.count)));
  EvalResult result;
  for (int first = 0; first < test.count; first += kEvalChunk) {
    const int count = std::min(kEvalChunk, test.count - first);
    std::iota(rows.begin(), rows.begin() + count, first);
    Inputs& in = inputs_.front();
    cpu::gather_normalize(isa_, test.images.data(), test.labels.data(), rows.data(), in.x.data(),
                          in.xT.data(), in.y.data(), count, kIn);
    team_.run([&](int member) { forward(in.xT.data(), count, {member, team_.size()}); });
    cpu::transpose(isa_, logitsT_.data(), logits_.data(), kOut, count);
    result.loss_sum += ref::softmax_xent(logits_.data(), in.y.data(), /*dlogits=*/nullptr, count, kOut, 1.0f);
    result.correct += ref::count_correct(logits_.data(), in.y.data(), count, kOut);
    result.count += count;
  }
  return result;
}

}  // namespace mnistdp
