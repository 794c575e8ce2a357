// The IDX reader and writer: round trips, and one test per way a file can be malformed. Every error must be a
// DataError whose message starts with "<path>: " and says what was found and what was expected.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "mnist_io/idx.hpp"
#include "skip_test.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using mnistdp::DataError;
using mnistdp::IdxImages;
using mnistdp::test::TempDir;

using Bytes = std::vector<std::uint8_t>;

IdxImages make_images(int count, int rows = 28, int cols = 28) {
  IdxImages images;
  images.count = count;
  images.rows = rows;
  images.cols = cols;
  images.pixels.resize(static_cast<std::size_t>(count) * static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < images.pixels.size(); ++i) {
    images.pixels[i] = static_cast<std::uint8_t>((i * 7 + i / 784) % 256);
  }
  return images;
}

Bytes make_labels(int count) {
  Bytes labels(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < labels.size(); ++i)
    labels[i] = static_cast<std::uint8_t>((i * 3) % 10);
  return labels;
}

// Big-endian uint32s, as in an IDX header.
Bytes be32(std::initializer_list<std::uint32_t> values) {
  Bytes bytes;
  for (const std::uint32_t v : values) {
    for (int shift = 24; shift >= 0; shift -= 8)
      bytes.push_back(static_cast<std::uint8_t>(v >> shift));
  }
  return bytes;
}

Bytes operator+(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Bytes zeros(std::size_t n) {
  return Bytes(n, 0);
}

Bytes read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_plain(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// The message of the DataError that `f` throws; fails the test when it throws nothing.
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

std::string image_error(const fs::path& path) {
  return data_error([&] { mnistdp::read_idx_images(path); });
}

std::string label_error(const fs::path& path) {
  return data_error([&] { mnistdp::read_idx_labels(path); });
}

// Every message starts with the file's path and a colon.
Catch::Matchers::StdString::StartsWithMatcher about(const fs::path& path) {
  return StartsWith(path.string() + ": ");
}

}  // namespace

TEST_CASE("IDX images round-trip through the writer and reader (raw and gzip)", "[idx]") {
  const bool gzip = GENERATE(false, true);
  TempDir tmp;
  const fs::path path = tmp / (gzip ? "images.gz" : "images");
  const IdxImages written = make_images(5);
  mnistdp::write_idx_images(path, written, gzip);

  const Bytes bytes = read_bytes(path);
  REQUIRE(bytes.size() >= 2);
  if (gzip) {
    CHECK((bytes[0] == 0x1f && bytes[1] == 0x8b));  // the gzip magic: really compressed
  } else {
    CHECK(bytes == be32({0x803, 5, 28, 28}) + written.pixels);  // exactly the IDX layout
  }

  const IdxImages read = mnistdp::read_idx_images(path);
  CHECK(read.count == 5);
  CHECK(read.rows == 28);
  CHECK(read.cols == 28);
  CHECK(read.pixels == written.pixels);
}

namespace {

// The mode a /sys/kernel/mm/transparent_hugepage file selects (the bracketed word), or nothing where the
// kernel has no such file.
std::optional<std::string> huge_page_mode(const char* file) {
  std::ifstream in(std::string("/sys/kernel/mm/transparent_hugepage/") + file);
  std::string word;
  while (in >> word)
    if (word.size() > 2 && word.front() == '[' && word.back() == ']') return word.substr(1, word.size() - 2);
  return std::nullopt;
}

// The kB of transparent huge pages in the mapping of this process that holds `address` (/proc/self/smaps).
long huge_page_kb_at(const void* address) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream fields(line);
    if (fields >> std::hex >> begin >> dash >> end && dash == '-') {  // a mapping's first line
      inside = begin <= at && at < end;
    } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      return std::stol(line.substr(line.find(':') + 1));
    }
  }
  return 0;
}

}  // namespace

TEST_CASE("IDX reader: the pixels are in 2 MiB pages where the kernel offers them", "[idx]") {
  // Training gathers random rows of the images, each on a page of its own with small pages: the reader asks
  // for huge ones before it writes the first byte. Only where the kernel grants them on that request, and
  // compacts memory to find them, can their presence be required.
  const std::optional<std::string> enabled = huge_page_mode("enabled");
  const std::optional<std::string> defrag = huge_page_mode("defrag");
  if (!enabled || *enabled == "never")
    mnistdp::test::skip_test("this kernel has no transparent huge pages (or they are switched off)");
  if (!defrag || (*defrag != "always" && *defrag != "madvise" && *defrag != "defer+madvise"))
    mnistdp::test::skip_test("this kernel does not compact memory for an advised region (defrag: " +
                             defrag.value_or("none") + ")");
  TempDir tmp;
  const fs::path path = tmp / "images";
  const IdxImages written = make_images(8'000);  // 6.3 MB: a whole 2 MiB page inside, wherever it starts
  mnistdp::write_idx_images(path, written, /*gzip=*/false);

  const IdxImages read = mnistdp::read_idx_images(path);
  REQUIRE(read.pixels == written.pixels);
  CHECK(huge_page_kb_at(read.pixels.data() + read.pixels.size() / 2) >= 2048);
}

TEST_CASE("IDX labels round-trip through the writer and reader (raw and gzip)", "[idx]") {
  const bool gzip = GENERATE(false, true);
  TempDir tmp;
  const fs::path path = tmp / (gzip ? "labels.gz" : "labels");
  const Bytes written = make_labels(37);
  mnistdp::write_idx_labels(path, written, gzip);

  const Bytes bytes = read_bytes(path);
  if (!gzip) CHECK(bytes == be32({0x801, 37}) + written);
  CHECK(mnistdp::read_idx_labels(path) == written);
}

TEST_CASE("IDX files with no items are valid", "[idx]") {
  TempDir tmp;
  mnistdp::write_idx_images(tmp / "images", make_images(0), false);
  mnistdp::write_idx_labels(tmp / "labels", {}, true);
  CHECK(mnistdp::read_idx_images(tmp / "images").count == 0);
  CHECK(mnistdp::read_idx_labels(tmp / "labels").empty());
}

TEST_CASE("IDX reader: a missing file", "[idx]") {
  TempDir tmp;
  const fs::path path = tmp / "nowhere" / "train-images-idx3-ubyte";
  CHECK_THAT(image_error(path), about(path) && Contains("no such file"));
  CHECK_THAT(label_error(path), about(path) && Contains("no such file"));
}

TEST_CASE("IDX reader: a folder where a file is expected", "[idx]") {
  TempDir tmp;
  CHECK_THAT(image_error(tmp.path()), about(tmp.path()) && Contains("is a folder") && Contains("expected"));
}

TEST_CASE("IDX reader: an unreadable file", "[idx]") {
  TempDir tmp;
  const fs::path path = tmp / "images";
  mnistdp::write_idx_images(path, make_images(1), false);
  fs::permissions(path, fs::perms::none);
  if (std::ifstream(path).is_open()) {
    // Root (as in containers) reads a file whatever its permissions: nothing to test then.
    WARN("skipped: this user can read a file with no read permission (running as root?)");
    return;
  }
  CHECK_THAT(image_error(path), about(path) && Contains("cannot open") && Contains("ermission denied"));
}

TEST_CASE("IDX reader: an empty file", "[idx]") {
  TempDir tmp;
  const fs::path path = tmp / "images";
  write_plain(path, {});
  CHECK_THAT(image_error(path), about(path) && Contains("empty") && Contains("16-byte header"));
}

TEST_CASE("IDX reader: a truncated header", "[idx]") {
  const bool gzip = GENERATE(false, true);
  TempDir tmp;
  const fs::path path = tmp / "file";

  SECTION("cut inside the magic number") {
    mnistdp::write_bytes(path, {0x00, 0x00, 0x08}, gzip);
    CHECK_THAT(image_error(path), about(path) && Contains("truncated header") && Contains("3 bytes") &&
                                      Contains("16-byte header"));
  }
  SECTION("cut inside the dimensions of an image file") {
    mnistdp::write_bytes(path, be32({0x803, 10}) + Bytes{0, 0}, gzip);
    CHECK_THAT(image_error(path),
               about(path) && Contains("truncated header") && Contains("found 10 of the 16"));
  }
  SECTION("cut inside the count of a label file") {
    mnistdp::write_bytes(path, be32({0x801}) + Bytes{0}, gzip);
    CHECK_THAT(label_error(path),
               about(path) && Contains("truncated header") && Contains("found 5 of the 8"));
  }
}

TEST_CASE("IDX reader: a label file read as images and an image file read as labels", "[idx]") {
  TempDir tmp;
  mnistdp::write_idx_labels(tmp / "labels", make_labels(3), false);
  mnistdp::write_idx_images(tmp / "images", make_images(3), false);
  CHECK_THAT(image_error(tmp / "labels"), about(tmp / "labels") && Contains("0x00000801") &&
                                              Contains("this is a label file, expected an image file") &&
                                              Contains("0x00000803"));
  CHECK_THAT(label_error(tmp / "images"), about(tmp / "images") && Contains("0x00000803") &&
                                              Contains("this is an image file, expected a label file") &&
                                              Contains("0x00000801"));
}

TEST_CASE("IDX reader: a wrong magic number", "[idx]") {
  TempDir tmp;
  const fs::path path = tmp / "images";

  SECTION("not an IDX file at all") {
    write_plain(path, be32({0x12345678, 1, 28, 28}) + zeros(784));
    CHECK_THAT(image_error(path), about(path) && Contains("not an IDX file") && Contains("0x12345678") &&
                                      Contains("expected 0x00000803"));
  }
  SECTION("an HTML page saved by a failed download") {
    const std::string html = "<!DOCTYPE html><html>404</html>";
    write_plain(path, Bytes(html.begin(), html.end()));
    CHECK_THAT(image_error(path),
               about(path) && Contains("not an IDX file") && Contains("\"<!DO\"") && Contains("HTML"));
  }
  SECTION("IDX, but of floats") {
    write_plain(path, be32({0x0D03, 1, 28, 28}) + zeros(4 * 784));
    CHECK_THAT(image_error(path), about(path) && Contains("0x00000d03") && Contains("float32") &&
                                      Contains("expected 0x08 (unsigned byte"));
  }
}

TEST_CASE("IDX reader: a wrong dimension count", "[idx]") {
  TempDir tmp;
  const fs::path path = tmp / "file";
  write_plain(path, be32({0x802, 2, 28}) + zeros(56));
  CHECK_THAT(image_error(path), about(path) && Contains("wrong dimension count") &&
                                    Contains("2 dimensions") && Contains("has 3"));
  CHECK_THAT(label_error(path), about(path) && Contains("wrong dimension count") &&
                                    Contains("2 dimensions") && Contains("has 1"));
}

TEST_CASE("IDX reader: images that are not 28x28", "[idx]") {
  TempDir tmp;
  const fs::path path = tmp / "images";
  mnistdp::write_idx_images(path, make_images(2, 32, 32), false);
  CHECK_THAT(image_error(path),
             about(path) && Contains("wrong image size") && Contains("32x32") && Contains("expected 28x28"));
}

TEST_CASE("IDX reader: truncated pixel data", "[idx]") {
  const bool gzip = GENERATE(false, true);
  TempDir tmp;
  const fs::path path = tmp / "images";
  mnistdp::write_bytes(path, be32({0x803, 10, 28, 28}) + zeros(7839), gzip);
  CHECK_THAT(image_error(path), about(path) && Contains("truncated data") &&
                                    Contains("expected 7840 bytes of pixel data") && Contains("10 images") &&
                                    Contains("found 7839"));
}

TEST_CASE("IDX reader: truncated label data", "[idx]") {
  const bool gzip = GENERATE(false, true);
  TempDir tmp;
  const fs::path path = tmp / "labels";
  mnistdp::write_bytes(path, be32({0x801, 100}) + zeros(60), gzip);
  CHECK_THAT(label_error(path), about(path) && Contains("truncated data") &&
                                    Contains("expected 100 bytes of label data") && Contains("found 60"));
}

TEST_CASE("IDX reader: trailing bytes after the data", "[idx]") {
  const bool gzip = GENERATE(false, true);
  TempDir tmp;
  const fs::path path = tmp / "file";
  SECTION("images") {
    mnistdp::write_bytes(path, be32({0x803, 2, 28, 28}) + zeros(2 * 784 + 5), gzip);
    CHECK_THAT(image_error(path), about(path) && Contains("trailing data: 5 bytes after the data") &&
                                      Contains("1568 bytes of pixel data"));
  }
  SECTION("labels") {
    mnistdp::write_bytes(path, be32({0x801, 3}) + Bytes{1, 2, 3, 4}, gzip);
    CHECK_THAT(label_error(path),
               about(path) && Contains("trailing data: 1 byte after the data") && Contains("3 labels"));
  }
}

TEST_CASE("IDX reader: a label above 9", "[idx]") {
  TempDir tmp;
  const fs::path path = tmp / "labels";
  Bytes labels = make_labels(20);
  labels[13] = 10;
  labels[17] = 255;
  mnistdp::write_idx_labels(path, labels, true);
  CHECK_THAT(label_error(path), about(path) && Contains("label 10 at index 13") && Contains("0 to 9") &&
                                    Contains("out of range: 2 of the 20 labels"));
}

TEST_CASE("IDX reader: a corrupt gzip stream", "[idx]") {
  TempDir tmp;
  const fs::path good = tmp / "good.gz";
  mnistdp::write_idx_images(good, make_images(20), true);
  Bytes bytes = read_bytes(good);
  REQUIRE(bytes.size() > 30);
  const fs::path path = tmp / "bad.gz";

  SECTION("an invalid deflate block") {
    bytes[10] = 0xff;  // the first block header after zlib's 10-byte gzip header: block type 3 does not exist
    write_plain(path, bytes);
    CHECK_THAT(image_error(path),
               about(path) && Contains("corrupt gzip stream") && Contains("invalid block type"));
  }
  SECTION("a wrong CRC") {
    bytes[bytes.size() - 8] ^= 0x01;  // the CRC-32 of the uncompressed data, in the 8-byte trailer
    write_plain(path, bytes);
    CHECK_THAT(image_error(path),
               about(path) && Contains("corrupt gzip stream") && Contains("incorrect data check"));
  }
  SECTION("a .gz file cut short") {
    bytes.resize(bytes.size() / 2);
    write_plain(path, bytes);
    CHECK_THAT(image_error(path), about(path) && Contains("corrupt gzip stream") && Contains("truncated"));
  }
  SECTION("a gzip magic followed by garbage") {
    write_plain(path, Bytes{0x1f, 0x8b, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42});
    CHECK_THAT(image_error(path), about(path) && Contains("corrupt gzip stream"));
  }
}

TEST_CASE("IDX reader: a header that claims a huge count does not allocate it", "[idx]") {
  TempDir tmp;
  const fs::path path = tmp / "file";
  SECTION("above the limit: refused before reading") {
    write_plain(path, be32({0x803, 0xffffffff, 28, 28}) + zeros(784));
    CHECK_THAT(image_error(path), about(path) && Contains("4294967295 images") && Contains("100000000"));
    write_plain(path, be32({0x801, 0xffffffff}) + zeros(10));
    CHECK_THAT(label_error(path), about(path) && Contains("4294967295 labels") && Contains("100000000"));
  }
  SECTION("below the limit: memory follows the data actually read") {
    write_plain(path, be32({0x803, 99'999'999, 28, 28}) + zeros(784));
    CHECK_THAT(image_error(path),
               about(path) && Contains("expected 78399999216 bytes") && Contains("found 784"));
  }
}

TEST_CASE("IDX reader: cut or damaged files give a DataError or valid data and never crash", "[idx]") {
  const bool gzip = GENERATE(false, true);
  TempDir tmp;
  const fs::path good = tmp / "good";
  const fs::path path = tmp / "damaged";
  mnistdp::write_idx_images(good, make_images(2), gzip);
  const Bytes bytes = read_bytes(good);

  // Any exception other than DataError escapes and fails the test.
  const auto try_read = [&](const Bytes& content) {
    write_plain(path, content);
    try {
      const IdxImages images = mnistdp::read_idx_images(path);
      CHECK(images.pixels.size() == static_cast<std::size_t>(images.count) * 784);
    } catch (const DataError& e) {
      CHECK_THAT(e.what(), about(path));
    }
  };
  for (std::size_t n = 0; n < bytes.size(); ++n)
    try_read(Bytes(bytes.begin(), bytes.begin() + n));

  std::mt19937 random(1234);
  for (int trial = 0; trial < 300; ++trial) {
    Bytes damaged = bytes;
    const int flips = 1 + trial % 4;
    for (int f = 0; f < flips; ++f)
      damaged[random() % damaged.size()] ^= static_cast<std::uint8_t>(1 + random() % 255);
    try_read(damaged);
  }
}

TEST_CASE("IDX writer: refuses inconsistent images and reports paths it cannot create", "[idx]") {
  TempDir tmp;
  IdxImages images = make_images(2);
  images.pixels.pop_back();
  const fs::path path = tmp / "images";
  CHECK_THAT(data_error([&] { mnistdp::write_idx_images(path, images, false); }),
             about(path) && Contains("2 images of 28x28 from 1567 pixels"));

  const fs::path nowhere = tmp / "no" / "such" / "folder" / "labels";
  CHECK_THAT(data_error([&] { mnistdp::write_idx_labels(nowhere, make_labels(1), true); }),
             about(nowhere) && Contains("cannot create"));
}
