#include "host/command/checkpoint_listener.hpp"

#include <fmt/format.h>

#include <string>

#include "host/checkpoint/checkpoint.hpp"
#include "host/checkpoint/setting_keys.hpp"
#include "host/model/params.hpp"

namespace mnistdp {

void CheckpointListener::on_epoch_end(const EpochReport& r) {
  if (!o_.save || !writes_) return;
  Checkpoint c;
  c.params.resize(ParamLayout::kCount);
  Replica& replica = *trainer_.replicas()[0];
  replica.store_parameters(c.params);
  c.momentum.emplace(ParamLayout::kCount);
  if (!trainer_.store_momentum(*c.momentum)) c.momentum.reset();
  c.epoch = r.complete ? r.epoch + 1 : r.epoch;
  c.step = r.total_steps;
  c.seed = t_.seed;
  c.data_fingerprint = fingerprint_;
  // The settings of the run, so that a resumed run goes on with them, and a reader
  // (tests/python/test_step_vs_torch.py) can redo its steps.
  c.extra[std::string(setting_keys::kBatchSize)] = std::to_string(t_.batch_size);
  c.extra[std::string(setting_keys::kAccumulate)] = std::to_string(t_.accumulate);
  c.extra[std::string(setting_keys::kLr)] = fmt::format("{}", t_.sgd.lr);
  c.extra[std::string(setting_keys::kMomentum)] = fmt::format("{}", t_.sgd.momentum);
  c.extra[std::string(setting_keys::kDampening)] = fmt::format("{}", t_.sgd.dampening);
  c.extra[std::string(setting_keys::kWeightDecay)] = fmt::format("{}", t_.sgd.weight_decay);
  c.extra[std::string(setting_keys::kNesterov)] = t_.sgd.nesterov ? "true" : "false";
  c.extra[std::string(setting_keys::kActivation)] = activation_name(t_.activation);
  save_checkpoint(*o_.save, c);
  saved_step_ = r.total_steps;
  signals_.set_message_on_kill(fmt::format(
      "mnist-dp: stopped at once by a second signal; the last checkpoint, after {} steps, is kept "
      "in {} (continue with --resume {})\n",
      r.total_steps, o_.save->string(), o_.save->string()));
}

}  // namespace mnistdp
