// libFuzzer target for the IDX reader (mnist_io/idx.hpp).
//
// Each input is written to a file (one per process, overwritten for every input) and read both as an image
// file and as a label file; zlib's reader takes the bytes as gzip when they start with gzip's magic and as a
// raw file otherwise. The same bytes are then written gzip-compressed and read again, so that every input
// also reaches the reader through a sound gzip stream. Each read must either succeed with a result that
// matches its header or throw DataError; any other exception, a crash or a sanitizer report is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "mnist_io/idx.hpp"

namespace {

namespace fs = std::filesystem;

fs::path& work_dir() {
  static fs::path dir;
  return dir;
}

void remove_work_dir() {
  std::error_code ec;
  fs::remove_all(work_dir(), ec);
}

const fs::path& raw_path() {
  static const fs::path path = work_dir() / "input.idx";
  return path;
}

const fs::path& gz_path() {
  static const fs::path path = work_dir() / "input.idx.gz";
  return path;
}

[[noreturn]] void finding(const char* what, const char* reader, const char* message) {
  std::fprintf(stderr, "fuzz_idx: %s from %s: %s\n", what, reader, message);
  std::abort();
}

template <typename Read>
void expect_result_or_data_error(const char* reader, Read read) {
  try {
    read();
  } catch (const mnistdp::DataError&) {
    // The reader refused the file with its own error: the expected outcome for a malformed one.
  } catch (const std::exception& e) {
    finding("an exception other than DataError", reader, e.what());
  } catch (...) {
    finding("an exception of unknown type", reader, "");
  }
}

void read_both(const fs::path& path) {
  expect_result_or_data_error("read_idx_images", [&] {
    const mnistdp::IdxImages images = mnistdp::read_idx_images(path);
    if (images.rows != mnistdp::kImageRows || images.cols != mnistdp::kImageCols || images.count < 0 ||
        images.pixels.size() != static_cast<std::size_t>(images.count) * mnistdp::kImagePixels)
      finding("an inconsistent result", "read_idx_images", "count, size and pixels disagree");
  });
  expect_result_or_data_error("read_idx_labels", [&] {
    const std::vector<std::uint8_t> labels = mnistdp::read_idx_labels(path);
    for (const std::uint8_t label : labels)
      if (label >= mnistdp::kNumClasses) finding("an inconsistent result", "read_idx_labels", "label >= 10");
  });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  // In memory (/dev/shm) unless TMPDIR says otherwise: every input is written twice and read four times.
  std::error_code ec;
  const bool shm =
      std::getenv("TMPDIR") == nullptr && fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0;
  std::string pattern =
      ((shm ? fs::path("/dev/shm") : fs::temp_directory_path()) / "mnistdp-fuzz-idx-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::perror("fuzz_idx: cannot create a temporary folder");
    std::abort();
  }
  work_dir() = pattern;
  std::atexit(remove_work_dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  {
    std::ofstream out(raw_path(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) finding("a harness failure", "writing the input", raw_path().c_str());
  }
  read_both(raw_path());

  const std::vector<std::uint8_t> bytes(data, data + size);
  mnistdp::write_bytes(gz_path(), bytes, /*gzip=*/true);
  read_both(gz_path());
  return 0;
}
