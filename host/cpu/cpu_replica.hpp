#pragma once
// A replica on the CPU: the reference ops where they are cheap, and the matrix products as cpu::gemm, in the
// widest vectors the CPU has (kernels/cpu/linear.hpp), on activations kept feature-major.
#include <cstdint>
#include <vector>

#include "host/cpu/cache_aligned.hpp"
#include "host/cpu/thread_team.hpp"
#include "host/model/params.hpp"
#include "host/training/momentum_shard.hpp"
#include "host/training/replica.hpp"
#include "kernels/cpu/linear.hpp"
#include "mnist_io/dataset.hpp"

namespace mnistdp {

class CpuReplica final : public Replica {
 public:
  // data must outlive the replica; CPU replicas share it read-only instead of each holding a copy. `threads`
  // share each step's work (ThreadTeam); the results are the same bits for any number. activation: the
  // hidden layer's (kernels/ref/activation.hpp).
  CpuReplica(const DataSplits& data, int index, int threads = 1, Activation activation = kDefaultActivation);

  std::string description() const override;
  void load_parameters(std::span<const float> params) override;
  void store_parameters(std::span<float> params) override;
  void load_momentum(std::span<const float> momentum) override;
  void store_momentum(std::span<float> momentum) override;
  bool has_momentum() const override { return has_momentum_; }
  void make_epoch_order(std::uint64_t seed, int epoch) override;
  void set_epoch_order(std::span<const std::int32_t> order) override;
  void compute_gradients(int first, int count, int global_batch) override;
  float* gradient_buffer() override { return grads_.data(); }
  void keep_gradients() override { kept_grads_ = grads_; }
  float* parameter_buffer() override { return params_.data(); }
  void sgd_step_shard(const SgdConfig& cfg, std::size_t first, std::size_t count) override;
  void add_kept_gradients() override;
  void sgd_step(const SgdConfig& cfg) override;
  // Without momentum: fc1's weight is updated as its gradient is made, and never stored (cpu::WeightUpdate),
  // which saves the SGD step's pass over 98.6% of the parameters and their gradients.
  bool step_alone(int first, int count, const SgdConfig& cfg) override;
  bool takes_whole_steps() const override { return true; }
  float loss_sum() override;
  bool loss_on_host() const override { return true; }
  EvalResult evaluate() override;
  ShardBuffers shard_buffers(int rows) override;
  void forward_logits(int first, int count) override;
  void batch_loss(const float* logits, const std::uint8_t* labels, float* dlogits, int rows,
                  int global_batch) override;
  void backward_from_dlogits(int count) override;
  void no_sgd_step() override {
    timeline_.mark(Mark::sgd);
    timeline_.mark(Mark::sgd_end);
  }
  void trace_steps(long steps) override { timeline_.start(steps); }
  std::vector<StepMarks> take_trace() override { return timeline_.take(); }

 private:
  // Resizes the activations for `rows` rows; a no-op once they are large enough.
  void reserve_rows(int rows);
  // One member's part of the forward pass from xT into logitsT_: every member calls it (it has a barrier). A
  // member's share of the batch's columns of logitsT_ is complete when it returns, all of them once every
  // member has passed the next barrier (or the team's run has returned).
  void forward(const float* xT, int rows, cpu::Part part);
  // compute_gradients; where fused_sgd is set, the whole SGD step as well, in the same task: fc1's weight in
  // its gradient's epilogue (its gradient never stored), the other parameters once every gradient is in.
  void gradients(int first, int count, int global_batch, const SgdConfig* fused_sgd);
  // sgd_step over the parameters from `begin` on.
  void sgd(const SgdConfig& cfg, std::size_t begin, std::size_t end);
  // Checks that rows [first, first + count) lie in the epoch's order (`who` names the call).
  void check_rows(int first, int count, const char* who) const;
  // One member's part of the backward pass from dlogits_ and dlogitsT_ over `count` rows: fc2's gradients,
  // dhiddenT_, then fc1's (its weight's update fused in where `fc1_update` is given).
  void backward(int count, cpu::Part part, const cpu::WeightUpdate* fc1_update);

  const DataSplits& data_;
  int index_;
  cpu::Isa isa_;
  Activation activation_;
  CacheAlignedVector<float> params_;      // [kCount]
  CacheAlignedVector<float> grads_;       // [kGradCount], the loss sum in the last slot
  CacheAlignedVector<float> kept_grads_;  // [kGradCount] once keep_gradients has run
  CacheAlignedVector<float> momentum_;    // [shard_.count()] once the first momentum step has run
  bool has_momentum_ = false;
  MomentumShard shard_;              // the parameters momentum_ covers
  std::vector<std::int32_t> order_;  // [train.count]

  // Activations, row-major: by rows ([rows, width]) where the name says nothing, feature-major ([width,
  // rows], kernels/cpu/linear.hpp) where it ends in T.
  int capacity_rows_ = 0;
  // The batch, gathered whole (by rows and feature-major at once) by every member of the team into its own
  // copy. The images are read-only and shared by the cores' caches, while a buffer one core writes and
  // another reads crosses between their caches in every step: split among two threads, the gather and its
  // transpose, and the products reading their halves from the other core, cost more than each thread
  // gathering it all.
  struct Inputs {
    CacheAlignedVector<float> x;   // [rows, 784]
    CacheAlignedVector<float> xT;  // [784, rows]
    std::vector<std::uint8_t> y;   // [rows]
  };
  std::vector<Inputs> inputs_;          // [team size]
  CacheAlignedVector<float> hiddenT_;   // [256, rows] after the activation
  CacheAlignedVector<float> preactT_;   // [256, rows] before it, where its derivative reads that
  CacheAlignedVector<float> logitsT_;   // [10, rows]
  CacheAlignedVector<float> logits_;    // [rows, 10], for evaluation's count of correct rows
  CacheAlignedVector<float> dlogits_;   // [rows, 10]
  CacheAlignedVector<float> dlogitsT_;  // [10, rows]
  CacheAlignedVector<float> row_loss_;  // [rows], each row's loss, summed in row order
  CacheAlignedVector<float> dhiddenT_;  // [256, rows]
  CacheAlignedVector<float> ones_;      // [rows], the bias gradients' sums as products
  CacheAlignedVector<float> fc2_dwT_;   // [256, 10], fc2's weight gradient before its transpose
  HostTimeline timeline_;               // the marks of traced steps (--trace)
  ThreadTeam team_;
};

}  // namespace mnistdp
