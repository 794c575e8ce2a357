#include "host/command/explain.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <cstdint>
#include <string>

#include "host/command/progress.hpp"
#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "host/training/shard.hpp"

namespace mnistdp {

namespace {

// At most this many row numbers per list: enough to see the shuffle, short enough to read.
constexpr std::size_t kShownRows = 6;

std::string some_rows(const std::int32_t* rows, int count) {
  const auto shown = std::min(static_cast<std::size_t>(count), kShownRows);
  std::string text = fmt::format("{}", fmt::join(rows, rows + shown, ", "));
  if (static_cast<std::size_t>(count) > shown) text += ", ...";
  return text;
}

}  // namespace

std::string sgd_words(const SgdConfig& sgd) {
  return fmt::format("lr {}, momentum {}, dampening {}, Nesterov {}, weight decay {}", sgd.lr, sgd.momentum,
                     sgd.dampening, sgd.nesterov ? "on" : "off", sgd.weight_decay);
}

namespace {

// The step's rows, and the first four of its parts, which both strategies share: order, scatter, gather,
// forward. Returns the global batch's row count.
// data_parallel: the replication that comes first under DataParallel, through `links`.
int explain_forward(std::FILE* out, const TrainConfig& config, int train_count,
                    const std::vector<std::string>& replica_names, bool data_parallel,
                    const std::string& links = {}) {
  // The run's next step: step 0 of epoch 0, or where a resumed run goes on.
  const int steps = (train_count + config.batch_size - 1) / config.batch_size;
  const int epoch = static_cast<int>(config.start_step / steps);
  const int step = static_cast<int>(config.start_step % steps);
  std::vector<std::int32_t> order(static_cast<std::size_t>(train_count));
  epoch_order(order, config.seed, epoch);
  const int start = step * config.batch_size;
  const int batch = std::min(config.batch_size, train_count - start);
  const int n = static_cast<int>(replica_names.size());
  const std::int32_t* rows = order.data() + start;

  console_print(
      out, "What step {} of epoch {} does{}:\n", step, epoch,
      config.start_step > 0 ? fmt::format(" (the resumed run's first, {} steps in)", config.start_step) : "");
  if (data_parallel)
    console_print(out,
                  "0. Replicate. Replica 0 (device 0) copies its parameters, {} floats, to the other {} "
                  "replica{}: it holds the only copy that lasts from step to step ({}).\n",
                  ParamLayout::kCount, n - 1, n == 2 ? "" : "s", links);
  console_print(
      out,
      "1. Order. The epoch visits the {} training rows in a permutation drawn from seed {} and epoch {}; "
      "every replica computes the same one, so nothing is sent. Step {} takes {} rows from position {}: {}\n",
      train_count, config.seed, epoch, step, batch, start, some_rows(rows, batch));
  console_print(out, "2. Scatter. The {} rows are split over {} replica{} with torch.chunk's sizes:\n", batch,
                n, n == 1 ? "" : "s");
  for (int r = 0; r < n; ++r) {
    const Shard s = shard_of(batch, n, r);
    if (s.count == 0)
      console_print(out, "   replica {} ({}): no rows this step; {}\n", r, replica_names[r],
                    data_parallel ? "its gradients are zeros in the reduction"
                                  : "it still joins the all-reduce with zeros");
    else
      console_print(out, "   replica {} ({}): batch rows {} to {}, training images {}\n", r, replica_names[r],
                    s.first, s.first + s.count - 1, some_rows(rows + s.first, s.count));
  }
  console_print(
      out,
      "3. Gather. Each replica copies its rows out of the uint8 data set and normalises every pixel p to "
      "(p/255 - 0.5)/0.5, giving x: [rows, 784] floats.\n");
  console_print(
      out,
      "4. Forward. h = {}(x fc1.weight^T + fc1.bias): [rows, 256]{}; logits = h fc2.weight^T + fc2.bias: "
      "[rows, 10].\n",
      activation_name(config.activation),
      activation_row(config.activation).reads_input
          ? " (its input z kept as well: the derivative of " +
                std::string(activation_name(config.activation)) + " is read from z)"
          : "");
  return batch;
}

}  // namespace

void explain_first_step(std::FILE* out, const TrainConfig& config, int train_count,
                        const std::vector<std::string>& replica_names, const std::string& communicator) {
  const int batch = explain_forward(out, config, train_count, replica_names, /*data_parallel=*/false);
  const float scale = 1.0f / static_cast<float>(batch);
  console_print(
      out,
      "5. Loss. Softmax cross-entropy per row; its gradient dlogits = (softmax - onehot) / {} (the global "
      "batch, {:.6g}, never the replica's own row count), so the replicas' gradients add up to the "
      "gradient of the batch's mean loss.\n",
      batch, static_cast<double>(scale));
  console_print(
      out,
      "6. Backward. fc2.weight' = dlogits^T h, fc2.bias' = column sums of dlogits, dh = dlogits fc2.weight "
      "masked where h = 0; fc1.weight' = dh^T x, fc1.bias' = column sums of dh (x needs no gradient).\n");
  console_print(
      out,
      "7. All-reduce. One sum over the replicas of one flat buffer of {} floats: the {} gradients and, in "
      "the last slot, the loss sum ({}).\n",
      ParamLayout::kGradCount, ParamLayout::kCount, communicator);
  console_print(
      out,
      "8. Update. Every replica applies the same SGD step ({}) to its own copy of the parameters with the "
      "same summed gradient, so the copies stay bit-identical without being sent again.\n",
      sgd_words(config.sgd));
  if (config.sgd.weight_decay != 0.0f)
    console_print(out, "   Weight decay first adds {} times each parameter to its gradient.\n",
                  config.sgd.weight_decay);
  if (config.sgd.momentum != 0.0f)
    console_print(
        out,
        "   Momentum: each replica keeps its own buffer, buf = {} * buf + {} * gradient (the gradient "
        "itself at the first step), identical on every replica, and steps along {}.\n",
        config.sgd.momentum, 1.0f - config.sgd.dampening,
        config.sgd.nesterov ? fmt::format("gradient + {} * buf", config.sgd.momentum) : "buf");
  console_print(out, "\n");
}

void explain_data_parallel_step(std::FILE* out, const TrainConfig& config, int train_count,
                                const std::vector<std::string>& replica_names, const std::string& links) {
  const int batch = explain_forward(out, config, train_count, replica_names, /*data_parallel=*/true, links);
  console_print(
      out,
      "5. Gather the logits. Every replica's logits and labels are copied to device 0, in replica order: "
      "[{}, 10] logits for the whole batch.\n",
      batch);
  console_print(
      out,
      "6. Loss, on device 0 alone. Softmax cross-entropy per row over the whole batch, and its gradient "
      "dlogits = (softmax - onehot) / {}: [{}, 10], each row the same number the all-reduce's replica would "
      "compute for it.\n",
      batch, batch);
  console_print(out,
                "7. Scatter d(logits). Each replica gets its rows of dlogits back and runs the backward pass "
                "from them: fc2.weight' = dlogits^T h, fc2.bias', dh masked where h = 0, fc1.weight' = dh^T "
                "x, fc1.bias'.\n");
  console_print(out,
                "8. Reduce. The replicas' gradients, {} floats each, are copied to device 0 and added there "
                "in replica order (not all-reduced: the other replicas never see the sum).\n",
                ParamLayout::kCount);
  console_print(out,
                "9. Update. Device 0 alone applies SGD ({}) to its parameters{}; the others' copies are "
                "stale until the next step's replication (0.) replaces them.\n",
                sgd_words(config.sgd),
                config.sgd.momentum != 0.0f ? " and keeps the only momentum buffer" : "");
  console_print(out, "\n");
}

}  // namespace mnistdp
