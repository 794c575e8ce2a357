#pragma once
// A Replica that hands every call to another one: a test derives from it and overrides only the calls it
// watches or changes.
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "host/training/replica.hpp"

namespace mnistdp::testing {

class ForwardingReplica : public Replica {
 public:
  explicit ForwardingReplica(std::unique_ptr<Replica> inner) : inner_(std::move(inner)) {}

  std::string description() const override { return inner_->description(); }
  void load_parameters(std::span<const float> p) override { inner_->load_parameters(p); }
  void store_parameters(std::span<float> p) override { inner_->store_parameters(p); }
  void load_momentum(std::span<const float> m) override { inner_->load_momentum(m); }
  void store_momentum(std::span<float> m) override { inner_->store_momentum(m); }
  bool has_momentum() const override { return inner_->has_momentum(); }
  void make_epoch_order(std::uint64_t seed, int epoch) override { inner_->make_epoch_order(seed, epoch); }
  void set_epoch_order(std::span<const std::int32_t> o) override { inner_->set_epoch_order(o); }
  void compute_gradients(int first, int count, int global_batch) override {
    inner_->compute_gradients(first, count, global_batch);
  }
  float* gradient_buffer() override { return inner_->gradient_buffer(); }
  void keep_gradients() override { inner_->keep_gradients(); }
  void add_kept_gradients() override { inner_->add_kept_gradients(); }
  void no_sgd_step() override { inner_->no_sgd_step(); }
  void sgd_step(const SgdConfig& cfg) override { inner_->sgd_step(cfg); }
  // step_alone is not handed on: the default's false makes the trainer take compute_gradients and sgd_step,
  // which is what a test that watches or changes them needs.
  float loss_sum() override { return inner_->loss_sum(); }
  bool loss_on_host() const override { return inner_->loss_on_host(); }
  bool watch_losses(long next_step) override { return inner_->watch_losses(next_step); }
  std::optional<NonFiniteLoss> first_nonfinite_loss() const override {
    return inner_->first_nonfinite_loss();
  }
  EvalResult evaluate() override { return inner_->evaluate(); }
  void trace_steps(long steps) override { inner_->trace_steps(steps); }
  std::vector<StepMarks> take_trace() override { return inner_->take_trace(); }

 private:
  std::unique_ptr<Replica> inner_;
};

}  // namespace mnistdp::testing
