#pragma once
// `mnist-dp train --explain`: the first step of the run told in plain words, with the real rows and shapes,
// for a reader who wants to see what nn.DataParallel's one line hides.
#include <cstdio>
#include <string>
#include <vector>

#include "host/training/trainer.hpp"

namespace mnistdp {

// Every SGD setting in torch.optim.SGD's terms: "lr 0.01, momentum 0, dampening 0, Nesterov off, weight decay
// 0" (a reader comparing with PyTorch needs all of them).
std::string sgd_words(const SgdConfig& sgd);

// What the run's next step does (step 0 of epoch 0, or a resumed run's first, from config.start_step).
// replica_names: each replica's description; communicator: how the gradients are summed.
void explain_first_step(std::FILE* out, const TrainConfig& config, int train_count,
                        const std::vector<std::string>& replica_names, const std::string& communicator);

// The same step as ZeRO stage 1 takes it (--strategy zero1): the all-reduce's halves, each replica stepping
// its shard of the parameters; communicator: how the gradients are summed.
void explain_zero1_step(std::FILE* out, const TrainConfig& config, int train_count,
                        const std::vector<std::string>& replica_names, const std::string& communicator);

// The same step as nn.DataParallel takes it (--strategy dataparallel); links: how device 0 reaches the
// others.
void explain_data_parallel_step(std::FILE* out, const TrainConfig& config, int train_count,
                                const std::vector<std::string>& replica_names, const std::string& links);

}  // namespace mnistdp
