#pragma once
// The IDX file format of MNIST and Fashion-MNIST, raw or gzip-compressed (the reader detects which).
// Every problem with a file is reported as a DataError whose message starts with the file's path.
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace mnistdp {

class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr std::uint32_t kIdxImagesMagic = 0x00000803;  // uint8, 3 dimensions
inline constexpr std::uint32_t kIdxLabelsMagic = 0x00000801;  // uint8, 1 dimension
inline constexpr int kImageRows = 28;
inline constexpr int kImageCols = 28;
inline constexpr int kImagePixels = kImageRows * kImageCols;
inline constexpr int kNumClasses = 10;

struct IdxImages {
  std::vector<std::uint8_t> pixels;  // [count, rows * cols] row-major
  int count = 0;
  int rows = 0;
  int cols = 0;
};

// Reads an image file; it must hold 28 x 28 images.
IdxImages read_idx_images(const std::filesystem::path& path);
// Reads a label file; every label must be < 10.
std::vector<std::uint8_t> read_idx_labels(const std::filesystem::path& path);

// Writers, for tests and tools; gzip selects a gzip-compressed file.
void write_idx_images(const std::filesystem::path& path, const IdxImages& images, bool gzip);
void write_idx_labels(const std::filesystem::path& path, const std::vector<std::uint8_t>& labels, bool gzip);
// Writes bytes exactly as given (gzip-compressed when asked), for tests and tools that need a malformed file.
void write_bytes(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes, bool gzip);

}  // namespace mnistdp
