// Finding a data set (flat folder, torchvision layouts, .gz or raw), loading its four files, naming it, and
// fingerprinting it.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mnist_io/dataset.hpp"
#include "mnist_io/idx.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using mnistdp::DataError;
using mnistdp::Dataset;
using mnistdp::IdxImages;
using mnistdp::test::TempDir;

using Bytes = std::vector<std::uint8_t>;

const std::array<std::string, 4> kNames{"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                        "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

IdxImages make_images(int count, std::uint8_t seed) {
  IdxImages images;
  images.count = count;
  images.rows = 28;
  images.cols = 28;
  images.pixels.resize(static_cast<std::size_t>(count) * 784);
  for (std::size_t i = 0; i < images.pixels.size(); ++i)
    images.pixels[i] = static_cast<std::uint8_t>(i + seed);
  return images;
}

Bytes make_labels(int count, std::uint8_t seed) {
  Bytes labels(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < labels.size(); ++i)
    labels[i] = static_cast<std::uint8_t>((i + seed) % 10);
  return labels;
}

struct SetShape {
  int train_images = 6;
  int train_labels = 6;
  int test_images = 4;
  int test_labels = 4;
  std::array<bool, 4> gzip{false, false, false, false};  // per file, in kNames order
  std::uint8_t seed = 0;
};

// Writes the four files of a data set into `dir` (created if needed).
void write_data_set(const fs::path& dir, const SetShape& shape = {}) {
  fs::create_directories(dir);
  const auto name = [&](int i) { return dir / (kNames[i] + (shape.gzip[i] ? ".gz" : "")); };
  mnistdp::write_idx_images(name(0), make_images(shape.train_images, shape.seed), shape.gzip[0]);
  mnistdp::write_idx_labels(name(1), make_labels(shape.train_labels, shape.seed), shape.gzip[1]);
  mnistdp::write_idx_images(name(2), make_images(shape.test_images, shape.seed), shape.gzip[2]);
  mnistdp::write_idx_labels(name(3), make_labels(shape.test_labels, shape.seed), shape.gzip[3]);
}

template <typename F>
std::string data_error(F&& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  FAIL("expected a DataError, none was thrown");
  return {};
}

Dataset small_set() {
  Dataset data;
  data.count = 2;
  data.labels = {3, 7};
  data.images = make_images(2, 0).pixels;
  return data;
}

const fs::path kSystemFashion = "/usr/share/datasets/fashion-mnist";

}  // namespace

TEST_CASE("find_data_dir: the four files in the folder itself", "[dataset]") {
  TempDir tmp;
  write_data_set(tmp.path());
  CHECK(mnistdp::find_data_dir(tmp.path()) == tmp.path());
}

TEST_CASE("find_data_dir: torchvision roots MNIST/raw and FashionMNIST/raw", "[dataset]") {
  TempDir tmp;
  const std::string sub = GENERATE(as<std::string>{}, "MNIST", "FashionMNIST");
  const fs::path raw = tmp / sub / "raw";
  write_data_set(raw, {.gzip = {true, true, true, true}});
  CHECK(mnistdp::find_data_dir(tmp.path()) == raw);
}

TEST_CASE("find_data_dir: .gz and raw files mixed in one folder", "[dataset]") {
  TempDir tmp;
  write_data_set(tmp.path(), {.gzip = {true, false, false, true}});
  const fs::path dir = mnistdp::find_data_dir(tmp.path());
  CHECK(dir == tmp.path());
  const mnistdp::DataSplits splits = mnistdp::load_data_dir(dir);
  CHECK(splits.train.count == 6);
  CHECK(splits.test.count == 4);
  CHECK(splits.train.labels == make_labels(6, 0));
  CHECK(splits.test.images == make_images(4, 0).pixels);
}

TEST_CASE("load_data_dir: a raw file is read in preference to its .gz twin", "[dataset]") {
  TempDir tmp;
  write_data_set(tmp.path(), {.seed = 1});
  // Different content in the .gz copies, so that the test sees which was read.
  write_data_set(tmp.path(),
                 {.train_images = 3, .train_labels = 3, .gzip = {true, true, true, true}, .seed = 2});
  const mnistdp::DataSplits splits = mnistdp::load_data_dir(mnistdp::find_data_dir(tmp.path()));
  CHECK(splits.train.count == 6);
  CHECK(splits.train.images == make_images(6, 1).pixels);
}

TEST_CASE("find_data_dir: the error names the missing file and every place looked at and says what to do",
          "[dataset]") {
  TempDir tmp;
  write_data_set(tmp.path());
  fs::remove(tmp / "t10k-labels-idx1-ubyte");
  const std::string message = data_error([&] { mnistdp::find_data_dir(tmp.path()); });
  CHECK_THAT(message, StartsWith(tmp.path().string() + ": ") && Contains("no data set found"));
  CHECK_THAT(message,
             Contains(tmp.path().string() + ": missing t10k-labels-idx1-ubyte (each may be raw or .gz)"));
  CHECK_THAT(message, Contains((tmp / "MNIST" / "raw").string() + ": no such folder"));
  CHECK_THAT(message, Contains((tmp / "FashionMNIST" / "raw").string() + ": no such folder"));
  CHECK_THAT(message, Contains("--data DIR") && Contains("scripts/download-mnist.sh") &&
                          Contains("apt-get install dataset-fashion-mnist"));
}

TEST_CASE("find_data_dir: several missing files in a torchvision folder are all named", "[dataset]") {
  TempDir tmp;
  fs::create_directories(tmp / "MNIST" / "raw");
  mnistdp::write_idx_labels(tmp / "MNIST" / "raw" / "train-labels-idx1-ubyte.gz", make_labels(6, 0), true);
  const std::string message = data_error([&] { mnistdp::find_data_dir(tmp.path()); });
  CHECK_THAT(message,
             Contains((tmp / "MNIST" / "raw").string() +
                      ": missing train-images-idx3-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte"));
}

TEST_CASE("find_data_dir: a root that does not exist or is a file", "[dataset]") {
  TempDir tmp;
  const fs::path missing = tmp / "no-such-folder";
  CHECK_THAT(data_error([&] { mnistdp::find_data_dir(missing); }),
             StartsWith(missing.string() + ": no such folder") && Contains("--data DIR"));

  const fs::path file = tmp / "a-file";
  std::ofstream(file) << "x";
  CHECK_THAT(data_error([&] { mnistdp::find_data_dir(file); }), StartsWith(file.string() + ": not a folder"));
}

TEST_CASE("find_data_dir_among: the first root that holds a data set wins", "[dataset]") {
  TempDir tmp;
  write_data_set(tmp / "second" / "FashionMNIST" / "raw");
  write_data_set(tmp / "third");
  const fs::path found = mnistdp::find_data_dir_among({tmp / "first", tmp / "second", tmp / "third"});
  CHECK(found == tmp / "second" / "FashionMNIST" / "raw");
}

TEST_CASE("find_data_dir_among: the error lists every root when none holds a data set", "[dataset]") {
  TempDir tmp;
  fs::create_directories(tmp / "empty");
  const std::string message = data_error([&] {
    mnistdp::find_data_dir_among({tmp / "absent", tmp / "empty"});
  });
  CHECK_THAT(message, Contains((tmp / "absent").string() + ": no such folder"));
  CHECK_THAT(message, Contains((tmp / "empty").string() + ": missing train-images-idx3-ubyte"));
  CHECK_THAT(message, Contains((tmp / "empty" / "MNIST" / "raw").string() + ": no such folder"));
  CHECK_THAT(message, Contains("--data DIR"));
}

TEST_CASE("find_default_data_dir: looks in ./data then in the Debian package", "[dataset]") {
  try {
    const fs::path dir = mnistdp::find_default_data_dir();
    const std::string text = dir.generic_string();
    CHECK((text.starts_with("./data") || text.starts_with(kSystemFashion.string())));
  } catch (const DataError& e) {
    CHECK_THAT(e.what(), Contains("./data: ") && Contains(kSystemFashion.string() + ": no such folder"));
  }
}

TEST_CASE("load_data_dir: image and label counts must agree in each split", "[dataset]") {
  TempDir tmp;
  SECTION("train") {
    write_data_set(tmp.path(), {.train_labels = 5});
    CHECK_THAT(data_error([&] { mnistdp::load_data_dir(tmp.path()); }),
               StartsWith((tmp / "train-images-idx3-ubyte").string() + ": ") && Contains("6 images") &&
                   Contains((tmp / "train-labels-idx1-ubyte").string() + " holds 5 labels"));
  }
  SECTION("test, with .gz files") {
    write_data_set(tmp.path(), {.test_images = 3, .gzip = {false, false, true, true}});
    CHECK_THAT(data_error([&] { mnistdp::load_data_dir(tmp.path()); }),
               StartsWith((tmp / "t10k-images-idx3-ubyte.gz").string() + ": ") && Contains("3 images") &&
                   Contains((tmp / "t10k-labels-idx1-ubyte.gz").string() + " holds 4 labels"));
  }
}

TEST_CASE("load_data_dir: missing and malformed files and empty splits", "[dataset]") {
  TempDir tmp;
  SECTION("missing") {
    write_data_set(tmp.path());
    fs::remove(tmp / "train-labels-idx1-ubyte");
    CHECK_THAT(data_error([&] { mnistdp::load_data_dir(tmp.path()); }),
               StartsWith((tmp / "train-labels-idx1-ubyte").string() + ": no such file"));
  }
  SECTION("malformed: the reader's message comes through") {
    write_data_set(tmp.path());
    mnistdp::write_idx_labels(tmp / "t10k-labels-idx1-ubyte", {1, 2, 12, 3}, false);
    CHECK_THAT(data_error([&] { mnistdp::load_data_dir(tmp.path()); }),
               StartsWith((tmp / "t10k-labels-idx1-ubyte").string() + ": label 12 at index 2"));
  }
  SECTION("empty") {
    write_data_set(tmp.path(), {.test_images = 0, .test_labels = 0});
    CHECK_THAT(data_error([&] { mnistdp::load_data_dir(tmp.path()); }),
               StartsWith((tmp / "t10k-images-idx3-ubyte").string() + ": holds no images"));
  }
}

TEST_CASE("load_data_dir: the data set is named from its path", "[dataset]") {
  TempDir tmp;
  const auto name_of = [&](const fs::path& dir) {
    write_data_set(dir);
    const mnistdp::DataSplits splits = mnistdp::load_data_dir(dir);
    CHECK(splits.dir == dir);
    return splits.name;
  };
  CHECK(name_of(tmp / "FashionMNIST" / "raw") == "Fashion-MNIST");
  CHECK(name_of(tmp / "datasets" / "fashion-mnist") == "Fashion-MNIST");
  CHECK(name_of(tmp / "MNIST" / "raw") == "MNIST");
  CHECK(name_of(tmp / "my-mnist-copy") == "MNIST");
  CHECK(name_of(tmp / "digits") == "digits");
  CHECK(name_of(tmp / "letters" / "") == "letters");  // a trailing separator does not hide the name
}

TEST_CASE("fingerprint: equal for equal data and different when one pixel or label or the count differs",
          "[dataset]") {
  const Dataset base = small_set();
  CHECK(mnistdp::fingerprint(base) == mnistdp::fingerprint(small_set()));

  Dataset pixel = small_set();
  pixel.images[1000] ^= 1;
  CHECK(mnistdp::fingerprint(pixel) != mnistdp::fingerprint(base));

  Dataset label = small_set();
  label.labels[1] = 8;
  CHECK(mnistdp::fingerprint(label) != mnistdp::fingerprint(base));

  Dataset count = small_set();
  count.count = 3;
  CHECK(mnistdp::fingerprint(count) != mnistdp::fingerprint(base));
}

TEST_CASE("fingerprint: FNV-1a 64 over the count then the labels then the pixels (pinned value)",
          "[dataset]") {
  // Pinned: checkpoints store the fingerprint, so a change of algorithm must be a deliberate one.
  Dataset data;
  data.count = 1;
  data.labels = {3};
  data.images.resize(784);
  for (std::size_t i = 0; i < data.images.size(); ++i)
    data.images[i] = static_cast<std::uint8_t>(i % 256);
  CHECK(mnistdp::fingerprint(data) == 0xde71996ecc98c215ULL);
}

TEST_CASE("the installed Fashion-MNIST package loads", "[dataset][system]") {
  std::error_code ec;
  if (!fs::is_directory(kSystemFashion, ec)) {
    // Skipped (exit 77, see tests/CMakeLists.txt), not passed: nothing was checked.
    std::printf("skipped: %s is not installed (apt-get install dataset-fashion-mnist to run this test)\n",
                kSystemFashion.string().c_str());
    std::fflush(stdout);
    std::exit(77);
  }
  const fs::path dir = mnistdp::find_data_dir(kSystemFashion);
  CHECK(dir == kSystemFashion);
  const mnistdp::DataSplits splits = mnistdp::load_data_dir(dir);
  CHECK(splits.name == "Fashion-MNIST");
  CHECK(splits.train.count == 60000);
  CHECK(splits.test.count == 10000);
  CHECK(splits.train.images.size() == 60000u * 784u);
  CHECK(splits.test.images.size() == 10000u * 784u);
  CHECK(splits.train.labels.size() == 60000u);
  CHECK(splits.test.labels.size() == 10000u);
  // The reader already refuses labels above 9; this checks the whole chain, and that every class occurs.
  std::array<int, 10> per_class{};
  for (const std::uint8_t label : splits.train.labels) {
    REQUIRE(label < 10);
    ++per_class[label];
  }
  for (const int n : per_class)
    CHECK(n == 6000);  // Fashion-MNIST is balanced
  CHECK(mnistdp::fingerprint(splits.train) != mnistdp::fingerprint(splits.test));
}
