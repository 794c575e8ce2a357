#pragma once
// The metadata keys under which `mnist-dp train --save` stores the run's settings, beside the training state
// that checkpoint.cpp reads itself (epoch, step, seed, fingerprint, momentum). A resumed run takes each back
// (host/command/resume.cpp), and tests/python/test_step_vs_torch.py reads them to redo a step in PyTorch, so
// a key once written keeps its spelling.
#include <string_view>

namespace mnistdp::setting_keys {

inline constexpr std::string_view kBatchSize = "mnist_dp.batch_size";
// Micro-batches of the batch size per optimiser step (--accumulate). A file without it took one.
inline constexpr std::string_view kAccumulate = "mnist_dp.accumulate";
inline constexpr std::string_view kLr = "mnist_dp.sgd.lr";
inline constexpr std::string_view kMomentum = "mnist_dp.sgd.momentum";
inline constexpr std::string_view kDampening = "mnist_dp.sgd.dampening";
inline constexpr std::string_view kWeightDecay = "mnist_dp.sgd.weight_decay";
inline constexpr std::string_view kNesterov = "mnist_dp.sgd.nesterov";
// The hidden layer's activation, a name of kActivations (kernels/ref/activation.hpp). A file without it is
// from before there was a choice, and trained with relu.
inline constexpr std::string_view kActivation = "mnist_dp.activation";

}  // namespace mnistdp::setting_keys
