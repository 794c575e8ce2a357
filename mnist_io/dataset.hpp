#pragma once
// A data set in MNIST's layout (60,000 training and 10,000 test images of 28 x 28 for MNIST itself), and
// where to find one.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace mnistdp {

struct Dataset {
  std::vector<std::uint8_t> images;  // [count, 784] uint8, kept as uint8: it is normalised batch by batch
  std::vector<std::uint8_t> labels;  // [count]
  int count = 0;
};

struct DataSplits {
  Dataset train;
  Dataset test;
  std::filesystem::path dir;  // the folder the four files were read from
  std::string name;           // "MNIST", "Fashion-MNIST", or the folder's name
};

// The folder that holds the four files train-images-idx3-ubyte, train-labels-idx1-ubyte,
// t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (each raw or with .gz). `root` may be that folder itself
// or a torchvision root (root/MNIST/raw, root/FashionMNIST/raw). Throws DataError naming every place looked
// at.
std::filesystem::path find_data_dir(const std::filesystem::path& root);

// As find_data_dir over several roots, in order: the first that holds a data set wins. A root that does not
// exist is passed over; the error, when none holds one, names every place looked at under every root.
std::filesystem::path find_data_dir_among(const std::vector<std::filesystem::path>& roots);

// The default search when no --data is given: ./data, then /usr/share/datasets/fashion-mnist.
std::filesystem::path find_default_data_dir();

// Reads and validates the four files of `dir` (as returned by find_data_dir).
DataSplits load_data_dir(const std::filesystem::path& dir);

// A fingerprint of the data (FNV-1a over labels and pixels), to tell data sets apart in checkpoints and logs.
std::uint64_t fingerprint(const Dataset& data);

}  // namespace mnistdp
