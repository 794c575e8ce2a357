#pragma once
// SimpleNet's initial parameters, drawn as nn.Linear's reset_parameters() draws them: weights and biases
// uniform in (-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming_uniform_ with a = sqrt(5) reduces to that bound). The
// values come from our own seeded generator, so they are the same on every platform but not PyTorch's values.
#include <cstdint>
#include <span>

namespace mnistdp {

// params: [ParamLayout::kCount], filled in the order fc1.weight, fc1.bias, fc2.weight, fc2.bias.
void init_parameters(std::span<float> params, std::uint64_t seed);

// The seed of epoch `epoch`'s shuffle, derived from the run's seed: what the shuffle's keys are made from
// (kernels/ref/shuffle_keys.hpp), on the host and on a device alike.
std::uint64_t epoch_shuffle_seed(std::uint64_t seed, int epoch);

// The order of the training rows in epoch `epoch`: a permutation of [0, count) that depends only on the seed
// and the epoch, so every replica (and a resumed run) computes the same one without sharing state. The rows
// sorted by their ShuffleKey (kernels/ref/shuffle_keys.hpp); a GPU replica makes the same permutation on its
// device (cuda::epoch_order).
void epoch_order(std::span<std::int32_t> order, std::uint64_t seed, int epoch);

}  // namespace mnistdp
