#include "host/explain.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <cstdint>

#include "host/init.hpp"
#include "host/params.hpp"
#include "host/shard.hpp"

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

void explain_first_step(std::FILE* out, const TrainConfig& config, int train_count,
                        const std::vector<std::string>& replica_names, const std::string& communicator) {
  std::vector<std::int32_t> order(static_cast<std::size_t>(train_count));
  epoch_order(order, config.seed, 0);
  const int batch = std::min(config.batch_size, train_count);
  const int n = static_cast<int>(replica_names.size());
  const float scale = 1.0f / static_cast<float>(batch);

  fmt::print(out, "What step 0 of epoch 0 does:\n");
  fmt::print(
      out,
      "1. Order. The epoch visits the {} training rows in a permutation drawn from seed {} and epoch 0; "
      "every replica computes the same one, so nothing is sent. Step 0 takes its first {} rows: {}\n",
      train_count, config.seed, batch, some_rows(order.data(), batch));
  fmt::print(out, "2. Scatter. The {} rows are split over {} replica{} with torch.chunk's sizes:\n", batch, n,
             n == 1 ? "" : "s");
  for (int r = 0; r < n; ++r) {
    const Shard s = shard_of(batch, n, r);
    if (s.count == 0)
      fmt::print(out, "   replica {} ({}): no rows this step; it still joins the all-reduce with zeros\n", r,
                 replica_names[r]);
    else
      fmt::print(out, "   replica {} ({}): batch rows {} to {}, training images {}\n", r, replica_names[r],
                 s.first, s.first + s.count - 1, some_rows(order.data() + s.first, s.count));
  }
  fmt::print(
      out,
      "3. Gather. Each replica copies its rows out of the uint8 data set and normalises every pixel p to "
      "(p/255 - 0.5)/0.5, giving x: [rows, 784] floats.\n");
  fmt::print(
      out,
      "4. Forward. h = relu(x fc1.weight^T + fc1.bias): [rows, 256]; logits = h fc2.weight^T + fc2.bias: "
      "[rows, 10].\n");
  fmt::print(
      out,
      "5. Loss. Softmax cross-entropy per row; its gradient dlogits = (softmax - onehot) / {} (the global "
      "batch, {:.6g}, never the replica's own row count), so the replicas' gradients add up to the "
      "gradient of the batch's mean loss.\n",
      batch, static_cast<double>(scale));
  fmt::print(
      out,
      "6. Backward. fc2.weight' = dlogits^T h, fc2.bias' = column sums of dlogits, dh = dlogits fc2.weight "
      "masked where h = 0; fc1.weight' = dh^T x, fc1.bias' = column sums of dh (x needs no gradient).\n");
  fmt::print(
      out,
      "7. All-reduce. One sum over the replicas of one flat buffer of {} floats: the {} gradients and, in "
      "the last slot, the loss sum ({}).\n",
      ParamLayout::kGradCount, ParamLayout::kCount, communicator);
  fmt::print(
      out,
      "8. Update. Every replica applies the same SGD step (lr {}) to its own copy of the parameters with "
      "the same summed gradient, so the copies stay bit-identical without being sent again.\n\n",
      config.sgd.lr);
}

}  // namespace mnistdp
