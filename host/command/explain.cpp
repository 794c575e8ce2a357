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
#include "host/training/strategy.hpp"

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

// The rows of the step explained: all of them, and its first micro-batch's (the same, unless it
// accumulates several).
struct ExplainedRows {
  int step_rows;
  int micro_rows;
  int micro_batches;
};

// The step's rows, and the first four of its parts, which both strategies share: order, scatter, gather,
// forward.
// data_parallel: the replication that comes first under DataParallel, through `links`.
ExplainedRows explain_forward(std::FILE* out, const TrainConfig& config, int train_count,
                              const std::vector<std::string>& replica_names, bool data_parallel,
                              const std::string& links = {}) {
  // The run's next step: step 0 of epoch 0, or where a resumed run goes on.
  const int step_rows = config.batch_size * config.accumulate;
  const int steps = (train_count + step_rows - 1) / step_rows;
  const int epoch = static_cast<int>(config.start_step / steps);
  const int step = static_cast<int>(config.start_step % steps);
  std::vector<std::int32_t> order(static_cast<std::size_t>(train_count));
  epoch_order(order, config.seed, epoch);
  const int start = step * step_rows;
  const int all = std::min(step_rows, train_count - start);
  const int micro_batches = (all + config.batch_size - 1) / config.batch_size;
  // The first micro-batch's, where the step accumulates several: the rest repeat it on their own rows.
  const int batch = std::min(config.batch_size, all);
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
      train_count, config.seed, epoch, step, all, start, some_rows(rows, all));
  if (micro_batches > 1)
    console_print(
        out,
        "   It takes them as {} micro-batches of up to {} rows (--accumulate {}), one after another; "
        "steps 2 to {} below are those of the first micro-batch, the {} rows from position {}.\n",
        micro_batches, config.batch_size, config.accumulate, data_parallel ? 8 : 6, batch, start);
  console_print(out, "2. Scatter. The {} rows are split over {} replica{} with torch.chunk's sizes:\n", batch,
                n, n == 1 ? "" : "s");
  for (int r = 0; r < n; ++r) {
    const Shard s = shard_of(batch, n, r);
    if (s.count == 0)
      console_print(out, "   replica {} ({}): no rows this step; {}\n", r, replica_names[r],
                    data_parallel ? "its gradients are zeros in the reduction" : "its gradient is zeros");
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
  return {all, batch, micro_batches};
}

// What the micro-batches after the first do, before the exchange: nothing where the step is one.
void explain_accumulation(std::FILE* out, const ExplainedRows& rows, const char* where) {
  if (rows.micro_batches < 2) return;
  console_print(
      out,
      "   Accumulate. The other {} micro-batch{} repeat the steps above on their own rows, and {} "
      "adds the gradient to the one kept from the micro-batches before, element by element; nothing "
      "is communicated until the last (DDP's no_sync). Their sum is the gradient of the {} rows' "
      "mean loss.\n",
      rows.micro_batches - 1, rows.micro_batches == 2 ? "" : "es", where, rows.step_rows);
}

}  // namespace

namespace {

// Steps 1 to 6 of the strategies where every replica takes its own shard's loss (the all-reduce, ZeRO-1).
void explain_to_own_gradients(std::FILE* out, const TrainConfig& config, int train_count,
                              const std::vector<std::string>& replica_names) {
  const ExplainedRows rows =
      explain_forward(out, config, train_count, replica_names, /*data_parallel=*/false);
  const int batch = rows.step_rows;
  const float scale = 1.0f / static_cast<float>(batch);
  console_print(
      out,
      "5. Loss. Softmax cross-entropy per row; its gradient dlogits = (softmax - onehot) / {} (the {}, "
      "{:.6g}, never the replica's own row count), so the replicas' gradients add up to the "
      "gradient of the {}'s mean loss.\n",
      batch, rows.micro_batches > 1 ? "step's rows" : "global batch", static_cast<double>(scale),
      rows.micro_batches > 1 ? "step" : "batch");
  console_print(
      out,
      "6. Backward. fc2.weight' = dlogits^T h, fc2.bias' = column sums of dlogits, dh = dlogits fc2.weight "
      "masked where h = 0; fc1.weight' = dh^T x, fc1.bias' = column sums of dh (x needs no gradient).\n");
  explain_accumulation(out, rows, "each replica");
}

}  // namespace

void explain_first_step(std::FILE* out, const TrainConfig& config, int train_count,
                        const std::vector<std::string>& replica_names, const std::string& communicator) {
  explain_to_own_gradients(out, config, train_count, replica_names);
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
  const ExplainedRows rows =
      explain_forward(out, config, train_count, replica_names, /*data_parallel=*/true, links);
  const int batch = rows.micro_rows;
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
      rows.step_rows, batch);
  console_print(out,
                "7. Scatter d(logits). Each replica gets its rows of dlogits back and runs the backward pass "
                "from them: fc2.weight' = dlogits^T h, fc2.bias', dh masked where h = 0, fc1.weight' = dh^T "
                "x, fc1.bias'.\n");
  console_print(out,
                "8. Reduce. The replicas' gradients, {} floats each, are copied to device 0 and added there "
                "in replica order (not all-reduced: the other replicas never see the sum).\n",
                ParamLayout::kCount);
  explain_accumulation(out, rows, "device 0, after its reduction,");
  console_print(out,
                "9. Update. Device 0 alone applies SGD ({}) to its parameters{}; the others' copies are "
                "stale until the next step's replication (0.) replaces them.\n",
                sgd_words(config.sgd),
                config.sgd.momentum != 0.0f ? " and keeps the only momentum buffer" : "");
  console_print(out, "\n");
}

void explain_zero1_step(std::FILE* out, const TrainConfig& config, int train_count,
                        const std::vector<std::string>& replica_names, const std::string& communicator) {
  explain_to_own_gradients(out, config, train_count, replica_names);
  const int n = static_cast<int>(replica_names.size());
  const std::vector<Shard> shards = parameter_shards(n);
  console_print(
      out,
      "7. Reduce-scatter. The flat gradient buffers are summed over the replicas as the all-reduce sums "
      "them, but each replica receives only the sum over its own shard of the {} parameters, and "
      "every replica the loss sum ({}):\n",
      ParamLayout::kCount, communicator);
  for (int r = 0; r < n; ++r) {
    const Shard& s = shards[static_cast<std::size_t>(r)];
    console_print(out, "   replica {} ({}): parameters {} to {}, {} floats\n", r, replica_names[r], s.first,
                  s.first + s.count - 1, s.count);
  }
  console_print(
      out,
      "8. Update. Each replica applies SGD ({}) to its shard of the parameters alone, with the summed "
      "gradient there.{}\n",
      sgd_words(config.sgd),
      config.sgd.momentum != 0.0f
          ? fmt::format(" It keeps the momentum of its shard alone: {} bytes on replica 0, where the "
                        "all-reduce keeps {} bytes on every replica (ZeRO's stage 1: the optimiser "
                        "state sharded).",
                        static_cast<std::size_t>(shards[0].count) * sizeof(float),
                        ParamLayout::kCount * sizeof(float))
          : std::string(" Without momentum there is no optimiser state to shard: the step saves "
                        "nothing over the all-reduce's but the SGD work, 1/N on each replica."));
  console_print(
      out,
      "9. All-gather. Each replica's updated shard is copied to every other replica, so that all hold "
      "the whole of the parameters, {} bytes each, for the next step's forward pass; the gradients, "
      "{} bytes, stay whole on every replica too (ZeRO's stages 2 and 3 shard those).\n\n",
      ParamLayout::kCount * sizeof(float), ParamLayout::kGradCount * sizeof(float));
}

}  // namespace mnistdp
