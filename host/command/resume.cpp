#include "host/command/resume.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

#include "host/checkpoint/checkpoint.hpp"
#include "host/checkpoint/setting_keys.hpp"
#include "host/command/explain.hpp"
#include "host/command/progress.hpp"
#include "host/command/step_words.hpp"
#include "host/model/init.hpp"
#include "host/model/params.hpp"

namespace mnistdp {

namespace {

// The settings a checkpoint stores (beside the seed and the batch size, kept in their own fields): a resumed
// run takes each from the file unless the command line gives it, and refuses a given value that differs,
// since the run would then no longer be the one saved.
class ResumedSettings {
 public:
  ResumedSettings(const TrainOptions& o, const Checkpoint& c) : o_(o), c_(c) {}

  void take_float(std::string_view option, const std::string& key, float& value) const {
    const auto saved = c_.extra.find(key);
    if (saved == c_.extra.end()) return;  // a checkpoint from before the setting was stored
    char* end = nullptr;
    const float x = std::strtof(saved->second.c_str(), &end);
    if (saved->second.empty() || *end != '\0' || !std::isfinite(x))
      throw CheckpointError(
          fmt::format("{}: the metadata {} is not a number: '{}'", o_.resume->string(), key, saved->second));
    refuse_if_given_otherwise(option, x == value, fmt::format("with {} {}", option, x),
                              fmt::format("{} {}", option, value));
    value = x;
  }

  void take_flag(std::string_view option, const std::string& key, bool& value) const {
    const auto saved = c_.extra.find(key);
    if (saved == c_.extra.end()) return;
    if (saved->second != "true" && saved->second != "false")
      throw CheckpointError(fmt::format("{}: the metadata {} is neither true nor false: '{}'",
                                        o_.resume->string(), key, saved->second));
    const bool x = saved->second == "true";
    refuse_if_given_otherwise(option, x == value, fmt::format("{} {}", x ? "with" : "without", option),
                              fmt::format("{}{}", option, value ? "" : "=false"));
    value = x;
  }

  void take_activation(Activation& value) const {
    const Activation saved = checkpoint_activation(c_, *o_.resume);
    refuse_if_given_otherwise("--activation", saved == value,
                              fmt::format("with --activation {}", activation_name(saved)),
                              fmt::format("--activation {}", activation_name(value)));
    value = saved;
  }

  void take_whole(std::string_view option, const std::optional<std::string>& saved_text,
                  std::uint64_t& value) const {
    if (!saved_text) return;
    std::uint64_t x = 0;
    const auto [end, error] = std::from_chars(saved_text->data(), saved_text->data() + saved_text->size(), x);
    if (saved_text->empty() || error != std::errc() || end != saved_text->data() + saved_text->size())
      throw CheckpointError(fmt::format("{}: the saved {} is not a whole number: '{}'", o_.resume->string(),
                                        option, *saved_text));
    refuse_if_given_otherwise(option, x == value, fmt::format("with {} {}", option, x),
                              fmt::format("{} {}", option, value));
    value = x;
  }

 private:
  void refuse_if_given_otherwise(std::string_view option, bool same, const std::string& saved,
                                 const std::string& given) const {
    if (same || !o_.is_given(option)) return;
    throw UsageError(fmt::format(
        "--resume {}: the run was saved {}, but the command line gives {}; a resumed run keeps the saved "
        "settings (leave {} out to continue it as it was, or start a new run from its parameters with "
        "--init-from)",
        o_.resume->string(), saved, given, option));
  }

  const TrainOptions& o_;
  const Checkpoint& c_;
};

}  // namespace

Activation checkpoint_activation(const Checkpoint& c, const std::filesystem::path& path) {
  const auto saved = c.extra.find(std::string(setting_keys::kActivation));
  if (saved == c.extra.end()) return Activation::relu;
  const std::optional<Activation> a = parse_activation(saved->second);
  if (!a)
    throw CheckpointError(fmt::format("{}: the metadata {} is '{}', not an activation this build knows ({})",
                                      path.string(), setting_keys::kActivation, saved->second,
                                      activation_choices()));
  return *a;
}

StartState start_state(const TrainOptions& o, TrainConfig& t, const DataSplits& data) {
  StartState state;
  if (o.resume) {
    Checkpoint c = load_checkpoint(*o.resume);
    if (!c.has_training_state)
      throw CheckpointError(
          fmt::format("{}: holds parameters but no training state (a file written by PyTorch?); "
                      "start from it with --init-from instead of --resume",
                      o.resume->string()));
    if (c.data_fingerprint != fingerprint(data.train))
      throw CheckpointError(
          fmt::format("{}: was trained on other data (fingerprint {:016x}, this data set {:016x})",
                      o.resume->string(), c.data_fingerprint, fingerprint(data.train)));
    const ResumedSettings saved(o, c);
    std::uint64_t batch_size = static_cast<std::uint64_t>(t.batch_size);
    const auto b = c.extra.find(std::string(setting_keys::kBatchSize));
    saved.take_whole("--batch-size",
                     b == c.extra.end() ? std::nullopt : std::optional<std::string>(b->second), batch_size);
    if (batch_size < 1 || batch_size > 60000)
      throw CheckpointError(
          fmt::format("{}: the saved batch size {} is out of range", o.resume->string(), batch_size));
    t.batch_size = static_cast<int>(batch_size);
    // A checkpoint from before --accumulate took one micro-batch a step.
    std::uint64_t accumulate = static_cast<std::uint64_t>(t.accumulate);
    const auto a = c.extra.find(std::string(setting_keys::kAccumulate));
    saved.take_whole("--accumulate", a == c.extra.end() ? std::string("1") : a->second, accumulate);
    if (accumulate < 1 || accumulate > 60000)
      throw CheckpointError(fmt::format("{}: the saved number of micro-batches a step ({}) is out of range",
                                        o.resume->string(), accumulate));
    t.accumulate = static_cast<int>(accumulate);
    saved.take_whole("--seed", std::to_string(c.seed), t.seed);
    saved.take_float("--lr", std::string(setting_keys::kLr), t.sgd.lr);
    saved.take_float("--momentum", std::string(setting_keys::kMomentum), t.sgd.momentum);
    saved.take_float("--dampening", std::string(setting_keys::kDampening), t.sgd.dampening);
    saved.take_float("--weight-decay", std::string(setting_keys::kWeightDecay), t.sgd.weight_decay);
    saved.take_flag("--nesterov", std::string(setting_keys::kNesterov), t.sgd.nesterov);
    saved.take_activation(t.activation);
    check_sgd_settings(t.sgd);
    state.step = c.step;
    state.params = std::move(c.params);
    state.momentum = std::move(c.momentum);
    const int step_rows = t.batch_size * t.accumulate;
    const int steps_per_epoch = (data.train.count + step_rows - 1) / step_rows;
    console_print(stdout, "resuming: {}, {}; with its settings: batch {}{}, {}, seed {}, activation {}\n",
                  o.resume->string(), progress_words(c.step, steps_per_epoch), t.batch_size,
                  accumulate_words(t.accumulate, t.batch_size), sgd_words(t.sgd), t.seed,
                  activation_name(t.activation));
    return state;
  }
  if (o.init_from) {
    state.params = load_checkpoint(*o.init_from).params;
    console_print(stdout, "initial parameters: {}\n", o.init_from->string());
    return state;
  }
  state.params.resize(ParamLayout::kCount);
  init_parameters(state.params, t.seed);
  return state;
}

// A multi-process run's start comes from rank 0, which alone reads --resume or --init-from (so the file need
// only be on rank 0's node, where rank 0 also saves): the step, the settings and the momentum are broadcast
// to the other ranks here; the parameters reach them through the trainer, which broadcasts rank 0's at its
// start.
StartState share_start_state(ProcessGroup& group, StartState state, TrainConfig& t) {
  struct Header {
    std::int64_t step;
    std::uint64_t seed;
    std::int32_t has_momentum;
    std::int32_t batch_size;
    std::int32_t accumulate;
    float lr;
    float momentum;
    float dampening;
    float weight_decay;
    std::int32_t nesterov;
    std::int32_t activation;
  } header{state.step,
           t.seed,
           state.momentum ? 1 : 0,
           t.batch_size,
           t.accumulate,
           t.sgd.lr,
           t.sgd.momentum,
           t.sgd.dampening,
           t.sgd.weight_decay,
           t.sgd.nesterov ? 1 : 0,
           static_cast<std::int32_t>(t.activation)};
  group.broadcast(std::as_writable_bytes(std::span(&header, 1)));
  if (group.rank() != 0) {
    state.step = header.step;
    t.seed = header.seed;
    t.batch_size = header.batch_size;
    t.accumulate = header.accumulate;
    t.sgd =
        SgdConfig{header.lr, header.momentum, header.dampening, header.weight_decay, header.nesterov != 0};
    t.activation = static_cast<Activation>(header.activation);
    state.momentum.reset();
    if (header.has_momentum != 0) state.momentum.emplace(ParamLayout::kCount, 0.0f);
  }
  if (state.momentum) group.broadcast(std::as_writable_bytes(std::span(*state.momentum)));
  return state;
}

}  // namespace mnistdp
