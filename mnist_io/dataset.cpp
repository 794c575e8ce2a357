#include "mnist_io/dataset.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join, which later fmt versions keep only here

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>
#include <system_error>
#include <utility>

#include "mnist_io/idx.hpp"

namespace mnistdp {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kTrainImages = "train-images-idx3-ubyte";
constexpr std::string_view kTrainLabels = "train-labels-idx1-ubyte";
constexpr std::string_view kTestImages = "t10k-images-idx3-ubyte";
constexpr std::string_view kTestLabels = "t10k-labels-idx1-ubyte";
constexpr std::array<std::string_view, 4> kFileNames{kTrainImages, kTrainLabels, kTestImages, kTestLabels};

constexpr std::string_view kWhatToDo =
    "To fix: pass --data DIR with the four MNIST files, run scripts/download-mnist.sh, or apt-get install "
    "dataset-fashion-mnist.";

// The default roots: a project-local folder first, so a download there wins over the system package.
const std::vector<fs::path>& default_roots() {
  static const std::vector<fs::path> roots{"./data", "/usr/share/datasets/fashion-mnist"};
  return roots;
}

// The file `name` in `dir`, raw or gzip-compressed; raw wins when both exist because it reads faster.
std::optional<fs::path> find_idx_file(const fs::path& dir, std::string_view name) {
  std::error_code ec;
  fs::path raw = dir / name;
  if (fs::is_regular_file(raw, ec)) return raw;
  fs::path gz = dir / fmt::format("{}.gz", name);
  if (fs::is_regular_file(gz, ec)) return gz;
  return std::nullopt;
}

// The places under `root` where a data set may live: the root itself, then torchvision's layouts.
std::array<fs::path, 3> candidates(const fs::path& root) {
  return {root, root / "MNIST" / "raw", root / "FashionMNIST" / "raw"};
}

// Why `dir` does not hold a data set, or an empty string when it does.
std::string candidate_problem(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "no such folder";
  std::vector<std::string_view> missing;
  for (const std::string_view name : kFileNames) {
    if (!find_idx_file(dir, name)) missing.push_back(name);
  }
  if (missing.empty()) return {};
  return fmt::format("missing {} (each may be raw or .gz)", fmt::join(missing, ", "));
}

// Looks in every candidate under `root`; returns the first that holds all four files, else adds one report
// line per candidate to `report`.
std::optional<fs::path> search_root(const fs::path& root, std::vector<std::string>& report) {
  for (const fs::path& dir : candidates(root)) {
    std::string problem = candidate_problem(dir);
    if (problem.empty()) return dir;
    report.push_back(fmt::format("  {}: {}", dir.string(), problem));
  }
  return std::nullopt;
}

std::string not_found_message(std::string_view where, const std::vector<std::string>& report) {
  return fmt::format(
      "{}no data set found: none of these folders holds the four files {}, {}, {} and {}:\n{}\n{}", where,
      kTrainImages, kTrainLabels, kTestImages, kTestLabels, fmt::join(report, "\n"), kWhatToDo);
}

fs::path require_file(const fs::path& dir, std::string_view name) {
  if (std::optional<fs::path> path = find_idx_file(dir, name)) return *path;
  throw DataError(fmt::format("{}: no such file (nor {}.gz)", (dir / name).string(), name));
}

Dataset load_split(const fs::path& dir, std::string_view images_name, std::string_view labels_name) {
  const fs::path images_path = require_file(dir, images_name);
  const fs::path labels_path = require_file(dir, labels_name);
  IdxImages images = read_idx_images(images_path);
  std::vector<std::uint8_t> labels = read_idx_labels(labels_path);
  if (static_cast<std::size_t>(images.count) != labels.size()) {
    throw DataError(
        fmt::format("{}: holds {} images but {} holds {} labels; the two files of a split must hold the "
                    "same number of items",
                    images_path.string(), images.count, labels_path.string(), labels.size()));
  }
  // An empty split would only fail later, and more obscurely, as a division by zero or an empty epoch.
  if (images.count == 0) {
    throw DataError(fmt::format("{}: holds no images; a data set needs at least one", images_path.string()));
  }
  return Dataset{std::move(images.pixels), std::move(labels), images.count};
}

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// The folder's own name, also for "." or a path with a trailing separator.
std::string folder_name(const fs::path& dir) {
  std::error_code ec;
  fs::path path = fs::absolute(dir, ec).lexically_normal();
  if (ec) path = dir.lexically_normal();
  if (!path.has_filename()) path = path.parent_path();
  std::string name = path.filename().string();
  return name.empty() ? dir.string() : name;
}

// The path as given is searched (not the absolute one, where a checkout named "mnist-dp" would make every
// data set "MNIST"), plus the folder's own name, so that "." inside .../fashion-mnist is still recognised.
std::string data_set_name(const fs::path& dir) {
  const std::string folder = folder_name(dir);
  const std::string haystack = lowercase(dir.string() + "/" + folder);
  if (haystack.find("fashion") != std::string::npos) return "Fashion-MNIST";
  if (haystack.find("mnist") != std::string::npos) return "MNIST";
  return folder;
}

void fnv1a(std::uint64_t& hash, const std::uint8_t* data, std::size_t n) {
  constexpr std::uint64_t kPrime = 1099511628211ULL;
  for (std::size_t i = 0; i < n; ++i) {
    hash ^= data[i];
    hash *= kPrime;
  }
}

}  // namespace

fs::path find_data_dir(const fs::path& root) {
  std::error_code ec;
  const fs::file_status status = fs::status(root, ec);
  if (status.type() == fs::file_type::not_found) {
    throw DataError(fmt::format("{}: no such folder\n{}", root.string(), kWhatToDo));
  }
  if (status.type() != fs::file_type::directory) {
    throw DataError(fmt::format("{}: not a folder; expected the folder that holds the four MNIST files\n{}",
                                root.string(), kWhatToDo));
  }
  std::vector<std::string> report;
  if (std::optional<fs::path> dir = search_root(root, report)) return *dir;
  throw DataError(not_found_message(fmt::format("{}: ", root.string()), report));
}

fs::path find_data_dir_among(const std::vector<fs::path>& roots) {
  std::vector<std::string> report;
  for (const fs::path& root : roots) {
    std::error_code ec;
    if (!fs::is_directory(root, ec)) {
      // Its subfolders cannot exist either: one line says it all.
      report.push_back(fmt::format("  {}: no such folder", root.string()));
      continue;
    }
    if (std::optional<fs::path> dir = search_root(root, report)) return *dir;
  }
  throw DataError(not_found_message("", report));
}

fs::path find_default_data_dir() {
  return find_data_dir_among(default_roots());
}

DataSplits load_data_dir(const fs::path& dir) {
  DataSplits splits;
  splits.train = load_split(dir, kTrainImages, kTrainLabels);
  splits.test = load_split(dir, kTestImages, kTestLabels);
  splits.dir = dir;
  splits.name = data_set_name(dir);
  return splits;
}

std::uint64_t fingerprint(const Dataset& data) {
  std::uint64_t hash = 14695981039346656037ULL;  // the FNV-1a 64 offset basis
  // The count goes in first, little-endian, so that the split point between labels and pixels is part of it.
  std::array<std::uint8_t, 8> count_bytes{};
  const auto count = static_cast<std::uint64_t>(data.count);
  for (std::size_t i = 0; i < count_bytes.size(); ++i)
    count_bytes[i] = static_cast<std::uint8_t>(count >> (8 * i));
  fnv1a(hash, count_bytes.data(), count_bytes.size());
  fnv1a(hash, data.labels.data(), data.labels.size());
  fnv1a(hash, data.images.data(), data.images.size());
  return hash;
}

}  // namespace mnistdp
