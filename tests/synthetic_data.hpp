#pragma once
// A small learnable data set made in memory: each class lights up its own band of rows, over uniform noise,
// so that a few steps of SGD visibly lower the loss. For tests of the trainer that must not depend on files.
#include <cstdint>
#include <random>

#include "mnist_io/dataset.hpp"
#include "mnist_io/idx.hpp"

namespace mnistdp::testing {

inline Dataset synthetic_dataset(int count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> label_dist(0, kNumClasses - 1);
  std::uniform_int_distribution<int> noise(0, 80);
  Dataset d;
  d.count = count;
  d.images.resize(static_cast<std::size_t>(count) * kImagePixels);
  d.labels.resize(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    const int label = label_dist(rng);
    d.labels[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(label);
    for (int p = 0; p < kImagePixels; ++p) {
      const int row = p / kImageCols;
      const bool lit = row >= 2 + 2 * label && row < 4 + 2 * label;
      d.images[static_cast<std::size_t>(i) * kImagePixels + static_cast<std::size_t>(p)] =
          static_cast<std::uint8_t>(lit ? 255 - noise(rng) : noise(rng));
    }
  }
  return d;
}

inline DataSplits synthetic_splits(int train_count, int test_count, std::uint32_t seed) {
  DataSplits s;
  s.train = synthetic_dataset(train_count, seed);
  s.test = synthetic_dataset(test_count, seed + 1);
  s.name = "synthetic";
  return s;
}

}  // namespace mnistdp::testing
