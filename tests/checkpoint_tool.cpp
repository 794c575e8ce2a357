// The C++ end of the Python interoperability tests (tests/python/):
//
//   checkpoint_tool write PATH SEED [--momentum]
//       writes a checkpoint whose every value the Python side can recompute:
//       value[i] = (((i * 2654435761 + seed) mod 2^64) mod 2001 - 1000) / 4096, exact in float32, over the
//       flat buffer (fc1.weight, fc1.bias, fc2.weight, fc2.bias); the momentum, if asked for, uses seed + 1.
//       Metadata: epoch 3, step 2814, the seed, fingerprint 0x0123456789abcdef XOR seed, extra
//       writer=checkpoint_tool.
//   checkpoint_tool dump PATH
//       prints the checkpoint as JSON: training state, metadata, and per tensor (parameters and momentum) the
//       shape, the sum in double precision over the row-major values, and the first 8 values.
//   checkpoint_tool batch-indices SEED EPOCH STEP BATCH_SIZE TRAIN_COUNT
//       prints the training rows of step STEP (counted from 0 within the epoch) as a JSON list: mnist-dp's
//       epoch_order(seed, epoch) rows [STEP * BATCH_SIZE, min(+BATCH_SIZE, TRAIN_COUNT)).
//   checkpoint_tool compare PATH REFERENCE RTOL
//       compares the parameters tensor by tensor, normwise: ||x - ref|| <= RTOL * ||ref|| (2-norms, in double
//       precision), and prints each tensor's relative error and largest difference. Exit 0 when every tensor
//       is within RTOL, 1 otherwise.
//
// Exit status: 0, 1 for a refused checkpoint or failed write (the message on stderr), 2 for a bad command
// line.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "host/checkpoint/checkpoint.hpp"
#include "host/model/init.hpp"
#include "host/model/params.hpp"

namespace mnistdp {
namespace {

class Usage : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename T>
T number(std::string_view text, std::string_view what) {
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size())
    throw Usage(fmt::format("{} must be an integer, got '{}'", what, text));
  return value;
}

std::vector<float> pattern(std::uint64_t seed) {
  std::vector<float> v(ParamLayout::kCount);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::uint64_t h = std::uint64_t{i} * 2654435761u + seed;  // wraps mod 2^64, as the Python side does
    v[i] = static_cast<float>(static_cast<long>(h % 2001) - 1000) / 4096.0f;
  }
  return v;
}

nlohmann::json describe(std::span<const float> flat) {
  struct View {
    const char* name;
    std::size_t offset;
    std::vector<int> shape;
  };
  using L = ParamLayout;
  const View views[] = {{"fc1.weight", L::kFc1Weight, {L::kHidden, L::kInput}},
                        {"fc1.bias", L::kFc1Bias, {L::kHidden}},
                        {"fc2.weight", L::kFc2Weight, {L::kClasses, L::kHidden}},
                        {"fc2.bias", L::kFc2Bias, {L::kClasses}}};
  nlohmann::json out = nlohmann::json::object();
  for (const View& v : views) {
    std::size_t count = 1;
    for (int d : v.shape)
      count *= static_cast<std::size_t>(d);
    double sum = 0;
    std::vector<double> first;
    for (std::size_t i = 0; i < count; ++i) {
      sum += flat[v.offset + i];
      if (i < 8) first.push_back(flat[v.offset + i]);
    }
    out[v.name] = {{"shape", v.shape}, {"sum", sum}, {"first", first}};
  }
  return out;
}

int write(const std::vector<std::string_view>& args) {
  if (args.size() < 2 || args.size() > 3 || (args.size() == 3 && args[2] != "--momentum"))
    throw Usage("usage: checkpoint_tool write PATH SEED [--momentum]");
  const auto seed = number<std::uint64_t>(args[1], "SEED");
  Checkpoint c;
  c.params = pattern(seed);
  if (args.size() == 3) c.momentum = pattern(seed + 1);
  c.epoch = 3;
  c.step = 2814;
  c.seed = seed;
  c.data_fingerprint = 0x0123456789abcdefull ^ seed;
  c.extra["writer"] = "checkpoint_tool";
  save_checkpoint(std::string(args[0]), c);
  return 0;
}

int dump(const std::vector<std::string_view>& args) {
  if (args.size() != 1) throw Usage("usage: checkpoint_tool dump PATH");
  const Checkpoint c = load_checkpoint(std::string(args[0]));
  nlohmann::json out = {
      {"has_training_state", c.has_training_state},
      {"epoch", c.epoch},
      {"step", c.step},
      {"seed", std::to_string(c.seed)},  // a string: JSON readers may hold numbers as doubles
      {"data_fingerprint", fmt::format("{:016x}", c.data_fingerprint)},
      {"extra", c.extra},
      {"tensors", describe(c.params)},
      {"momentum", c.momentum ? describe(*c.momentum) : nlohmann::json(nullptr)},
  };
  fmt::print("{}\n", out.dump(2));
  return 0;
}

int batch_indices(const std::vector<std::string_view>& args) {
  if (args.size() != 5)
    throw Usage("usage: checkpoint_tool batch-indices SEED EPOCH STEP BATCH_SIZE TRAIN_COUNT");
  const auto seed = number<std::uint64_t>(args[0], "SEED");
  const auto epoch = number<int>(args[1], "EPOCH");
  const auto step = number<long>(args[2], "STEP");
  const auto batch = number<long>(args[3], "BATCH_SIZE");
  const auto count = number<int>(args[4], "TRAIN_COUNT");
  if (epoch < 0 || step < 0 || batch < 1 || count < 1 || step * batch >= count)
    throw Usage(fmt::format("no step {} of batch {} in an epoch of {} rows", step, batch, count));
  std::vector<std::int32_t> order(static_cast<std::size_t>(count));
  epoch_order(order, seed, epoch);
  const auto first = static_cast<std::size_t>(step * batch);
  const std::size_t last = std::min(order.size(), first + static_cast<std::size_t>(batch));
  fmt::print("{}\n", nlohmann::json(std::vector<std::int32_t>(order.begin() + static_cast<long>(first),
                                                              order.begin() + static_cast<long>(last)))
                         .dump());
  return 0;
}

int compare(const std::vector<std::string_view>& args) {
  if (args.size() != 3) throw Usage("usage: checkpoint_tool compare PATH REFERENCE RTOL");
  const Checkpoint x = load_checkpoint(std::string(args[0]));
  const Checkpoint ref = load_checkpoint(std::string(args[1]));
  const auto rtol = number<double>(args[2], "RTOL");
  bool within = true;
  using L = ParamLayout;
  struct Tensor {
    const char* name;
    std::size_t offset, size;
  };
  const Tensor tensors[] = {{"fc1.weight", L::kFc1Weight, L::kFc1Bias - L::kFc1Weight},
                            {"fc1.bias", L::kFc1Bias, L::kFc2Weight - L::kFc1Bias},
                            {"fc2.weight", L::kFc2Weight, L::kFc2Bias - L::kFc2Weight},
                            {"fc2.bias", L::kFc2Bias, L::kCount - L::kFc2Bias}};
  for (const Tensor& view : tensors) {
    double diff2 = 0, ref2 = 0, largest = 0;
    for (std::size_t i = view.offset; i < view.offset + view.size; ++i) {
      const double d = static_cast<double>(x.params[i]) - static_cast<double>(ref.params[i]);
      diff2 += d * d;
      ref2 += static_cast<double>(ref.params[i]) * static_cast<double>(ref.params[i]);
      largest = std::max(largest, std::abs(d));
    }
    const double relative = std::sqrt(diff2) / std::sqrt(ref2);
    const bool ok = std::sqrt(diff2) <= rtol * std::sqrt(ref2);
    within = within && ok;
    fmt::print("{}: {:<10} relative error {:.3g}, largest difference {:.3g}\n", ok ? "ok" : "DIFFERS",
               view.name, relative, largest);
  }
  return within ? 0 : 1;
}

int run(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  try {
    if (args.empty()) throw Usage("usage: checkpoint_tool write|dump|batch-indices|compare ...");
    const std::string_view command = args.front();
    args.erase(args.begin());
    if (command == "write") return write(args);
    if (command == "dump") return dump(args);
    if (command == "batch-indices") return batch_indices(args);
    if (command == "compare") return compare(args);
    throw Usage(fmt::format("unknown command '{}' (write, dump, batch-indices or compare)", command));
  } catch (const Usage& e) {
    fmt::print(stderr, "checkpoint_tool: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "checkpoint_tool: {}\n", e.what());
    return 1;
  }
}

}  // namespace
}  // namespace mnistdp

int main(int argc, char** argv) {
  return mnistdp::run(argc, argv);
}
