#include "host/model/init.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "host/model/params.hpp"
#include "host/model/random.hpp"
#include "kernels/ref/shuffle_keys.hpp"

namespace mnistdp {

namespace {

// Distinct streams for initialisation and for each epoch's shuffle, derived from the one user-facing seed.
constexpr std::uint64_t kInitStream = 0x5EED'0000'0000'0001ull;
constexpr std::uint64_t kShuffleStream = 0x5EED'0000'0000'0002ull;

// splitmix64's output is a strong hash of its state, so hashing (seed, stream) and then offsetting by the
// index gives independent-looking streams for neighbouring seeds and epochs.
std::uint64_t stream_seed(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return Rng(seed ^ stream).next_u64() + index * 0xD1B54A32D192ED03ull;
}

void fill_uniform(Rng& rng, float* values, std::size_t count, int fan_in) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  for (std::size_t i = 0; i < count; ++i)
    values[i] = rng.uniform(-bound, bound);
}

}  // namespace

void init_parameters(std::span<float> params, std::uint64_t seed) {
  if (params.size() != ParamLayout::kCount) throw std::invalid_argument("init_parameters: wrong buffer size");
  Rng rng(stream_seed(seed, kInitStream, 0));
  const auto views = ParamViews<float>::of(params.data());
  constexpr int kIn = ParamLayout::kInput, kHid = ParamLayout::kHidden, kOut = ParamLayout::kClasses;
  fill_uniform(rng, views.fc1_weight, std::size_t{kHid} * kIn, kIn);
  fill_uniform(rng, views.fc1_bias, kHid, kIn);
  fill_uniform(rng, views.fc2_weight, std::size_t{kOut} * kHid, kHid);
  fill_uniform(rng, views.fc2_bias, kOut, kHid);
}

std::uint64_t epoch_shuffle_seed(std::uint64_t seed, int epoch) {
  return stream_seed(seed, kShuffleStream, static_cast<std::uint64_t>(epoch));
}

void epoch_order(std::span<std::int32_t> order, std::uint64_t seed, int epoch) {
  // The device's algorithm (kernels/cuda/thrust/thrust_ops.cu) on the host: the same keys, sorted. The keys
  // are distinct, so std::sort's order is the device's radix sort's, to the last row.
  const int count = static_cast<int>(order.size());
  const ShuffleKey key{epoch_shuffle_seed(seed, epoch), shuffle_row_bits(count)};
  std::vector<std::uint64_t> keys(order.size());
  for (std::size_t row = 0; row < keys.size(); ++row)
    keys[row] = key(row);
  std::sort(keys.begin(), keys.end());
  std::transform(keys.begin(), keys.end(), order.begin(), RowOfKey{key.row_bits});
}

}  // namespace mnistdp
