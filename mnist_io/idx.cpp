#include "mnist_io/idx.hpp"

#include <fmt/format.h>
#include <sys/mman.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string_view>
#include <system_error>

namespace mnistdp {
namespace {

namespace fs = std::filesystem;

// A corrupt header must not make the reader allocate terabytes: real data sets hold well under a million
// images.
constexpr std::uint64_t kMaxItems = 100'000'000;
// Data is read in chunks so that memory grows with what the file really holds, not with what its header
// claims.
constexpr std::size_t kChunkBytes = std::size_t{1} << 20;
// Reserving the whole payload up front saves the copies of geometric growth; beyond this the header must
// prove itself by the data actually arriving.
constexpr std::uint64_t kMaxReserveBytes = std::uint64_t{64} << 20;

struct GzCloser {
  void operator()(gzFile_s* file) const noexcept { gzclose(file); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

[[noreturn]] void fail(const fs::path& path, std::string_view problem) {
  throw DataError(fmt::format("{}: {}", path.string(), problem));
}

// "1 byte", "5 bytes": messages quote counts that are often 1.
std::string count_of(std::uint64_t n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

std::string errno_message(int err) {
  return std::generic_category().message(err);
}

// What one IDX file kind looks like, so that images and labels share one reader.
struct IdxKind {
  const char* noun;          // "image", "label"
  const char* a_noun;        // with its article, "an image", "a label"
  const char* a_other_noun;  // the kind with the other dimension count
  std::uint32_t magic;
  int dims;
  int other_dims;
};
constexpr IdxKind kImagesKind{"image", "an image", "a label", kIdxImagesMagic, 3, 1};
constexpr IdxKind kLabelsKind{"label", "a label", "an image", kIdxLabelsMagic, 1, 3};

constexpr std::uint8_t kIdxTypeUnsignedByte = 0x08;

std::string_view idx_type_name(std::uint8_t code) {
  switch (code) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
    default:
      return "unknown";
  }
}

std::uint32_t load_be32(const std::uint8_t* bytes) {
  return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) | (std::uint32_t{bytes[2]} << 8) |
         std::uint32_t{bytes[3]};
}

void store_be32(std::uint8_t* bytes, std::uint32_t value) {
  bytes[0] = static_cast<std::uint8_t>(value >> 24);
  bytes[1] = static_cast<std::uint8_t>(value >> 16);
  bytes[2] = static_cast<std::uint8_t>(value >> 8);
  bytes[3] = static_cast<std::uint8_t>(value);
}

// Reads a file through zlib, which passes raw files through unchanged, and turns every zlib or I/O failure
// into a DataError naming the file.
class IdxInput {
 public:
  explicit IdxInput(const fs::path& path) : path_(path) {
    // Checked before gzopen because its errno alone cannot tell "missing" from "a folder" clearly.
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (status.type() == fs::file_type::not_found) fail(path, "no such file");
    if (status.type() == fs::file_type::directory) fail(path, "is a folder, expected an IDX file");
    errno = 0;
    file_.reset(gzopen(path.c_str(), "rb"));
    if (!file_) {
      fail(path,
           fmt::format("cannot open the file: {}", errno != 0 ? errno_message(errno) : "out of memory"));
    }
    // A larger buffer than zlib's 8 KiB default: fewer read calls on the 47 MB image files.
    gzbuffer(file_.get(), 1U << 18);
  }

  const fs::path& path() const { return path_; }

  // Reads up to n bytes; fewer only at the end of the data. A corrupt gzip stream throws rather than ending
  // early.
  std::size_t read(std::uint8_t* out, std::size_t n) {
    std::size_t got = 0;
    while (got < n) {
      const auto want = static_cast<unsigned>(std::min(n - got, kChunkBytes));
      const int r = gzread(file_.get(), out + got, want);
      if (r < 0) {
        check_stream();
        fail(path_, "read error");  // zlib reported an error without saying which
      }
      if (r == 0) break;
      got += static_cast<std::size_t>(r);
    }
    // A short read is either the true end of the data or a stream that broke off: tell them apart.
    if (got < n) check_stream();
    return got;
  }

  // Counts what is left (for the "trailing bytes" message), reading it through so a gzip CRC is checked too.
  std::uint64_t count_rest() {
    std::vector<std::uint8_t> buffer(std::size_t{64} << 10);  // most files have nothing left: keep it small
    std::uint64_t total = 0;
    for (std::size_t n; (n = read(buffer.data(), buffer.size())) > 0;)
      total += n;
    return total;
  }

 private:
  void check_stream() {
    int errnum = Z_OK;
    const char* message = gzerror(file_.get(), &errnum);
    switch (errnum) {
      case Z_OK:
      case Z_STREAM_END:
        return;
      case Z_ERRNO:
        fail(path_, fmt::format("read error: {}", errno_message(errno)));
      case Z_BUF_ERROR:  // zlib's "unexpected end of file": the compressed stream stops mid-way
        fail(path_,
             "corrupt gzip stream: the compressed data ends early (the .gz file is truncated; "
             "download it again)");
      default:
        fail(path_, fmt::format(
                        "corrupt gzip stream: {} (zlib error {}); the .gz file is damaged, download it again",
                        message != nullptr ? message : "unknown error", errnum));
    }
  }

  fs::path path_;
  GzFile file_;
};

std::string printable_prefix(const std::array<std::uint8_t, 4>& bytes) {
  std::string text;
  for (const std::uint8_t b : bytes) {
    if (!std::isprint(b)) return {};
    text.push_back(static_cast<char>(b));
  }
  return text;
}

// Reads and checks the magic number, whose third byte is the element type and fourth the dimension count.
void read_magic(IdxInput& in, const IdxKind& kind) {
  const std::size_t header_bytes = 4 + 4 * static_cast<std::size_t>(kind.dims);
  std::array<std::uint8_t, 4> bytes{};
  const std::size_t got = in.read(bytes.data(), bytes.size());
  if (got == 0) {
    fail(in.path(), fmt::format("the file is empty, expected an IDX {} file ({}-byte header, then the data)",
                                kind.noun, header_bytes));
  }
  if (got < bytes.size()) {
    fail(in.path(), fmt::format("truncated header: the file holds {}, an IDX {} file starts with a {}-byte "
                                "header",
                                count_of(got, "byte"), kind.noun, header_bytes));
  }
  const std::uint32_t magic = load_be32(bytes.data());
  if (magic == kind.magic) return;

  if (bytes[0] != 0 || bytes[1] != 0) {
    const std::string text = printable_prefix(bytes);
    const std::string hint =
        text.empty()
            ? std::string{}
            : fmt::format("; it starts with the text \"{}\" (a failed download often saves an HTML page)",
                          text);
    fail(in.path(), fmt::format("not an IDX file: magic number 0x{:08x}, expected 0x{:08x} (IDX {} file){}",
                                magic, kind.magic, kind.noun, hint));
  }
  if (bytes[2] != kIdxTypeUnsignedByte) {
    fail(in.path(),
         fmt::format("wrong magic number 0x{:08x}: element type 0x{:02x} ({}), expected 0x08 (unsigned "
                     "byte, magic 0x{:08x})",
                     magic, bytes[2], idx_type_name(bytes[2]), kind.magic));
  }
  if (bytes[3] == kind.other_dims) {
    fail(in.path(),
         fmt::format("wrong magic number 0x{:08x}: this is {} file, expected {} file (magic 0x{:08x})", magic,
                     kind.a_other_noun, kind.a_noun, kind.magic));
  }
  fail(in.path(),
       fmt::format("wrong dimension count: magic number 0x{:08x} says {} dimensions, an IDX {} file has {} "
                   "(magic 0x{:08x})",
                   magic, bytes[3], kind.noun, kind.dims, kind.magic));
}

// Reads the magic number and the dimensions that follow it.
std::vector<std::uint32_t> read_header(IdxInput& in, const IdxKind& kind) {
  read_magic(in, kind);
  std::vector<std::uint8_t> bytes(4 * static_cast<std::size_t>(kind.dims));
  const std::size_t got = in.read(bytes.data(), bytes.size());
  if (got < bytes.size()) {
    fail(in.path(), fmt::format("truncated header: found {} of the {} header bytes of an IDX {} file",
                                4 + got, 4 + bytes.size(), kind.noun));
  }
  std::vector<std::uint32_t> dims(static_cast<std::size_t>(kind.dims));
  for (std::size_t i = 0; i < dims.size(); ++i)
    dims[i] = load_be32(bytes.data() + 4 * i);
  return dims;
}

void check_count(const IdxInput& in, std::uint32_t count, const char* noun) {
  if (count > kMaxItems) {
    fail(in.path(), fmt::format("the header says {} {}s, more than the {} this reader accepts (the header is "
                                "probably corrupt)",
                                count, noun, kMaxItems));
  }
}

// Asks the kernel to back `bytes`' reserved but untouched memory with 2 MiB pages where it can. Training
// reads the images at random rows, each on a page of its own: with 4 KiB pages nearly every row of a step's
// gather misses the TLB, and the page walks, through the host's tables too in a virtual machine, cost up to a
// quarter of an epoch on one core (docs/benchmarks.md). Only advice: where the kernel has no transparent huge
// pages, or none are free, the memory stays in small pages and nothing else changes, so the result is not
// checked.
void advise_huge_pages(std::vector<std::uint8_t>& bytes) {
#ifdef MADV_HUGEPAGE
  constexpr std::uintptr_t kHugePage = std::uintptr_t{2} << 20;
  const auto start = reinterpret_cast<std::uintptr_t>(bytes.data());
  const std::uintptr_t first = (start + kHugePage - 1) & ~(kHugePage - 1);
  const std::uintptr_t last = (start + bytes.capacity()) & ~(kHugePage - 1);
  if (last > first) static_cast<void>(madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE));
#else
  static_cast<void>(bytes);
#endif
}

// Reads exactly `expected` bytes of data; `what` describes them for the message ("pixel data (10 images of
// 28x28)").
std::vector<std::uint8_t> read_payload(IdxInput& in, std::uint64_t expected, std::string_view what_bytes,
                                       std::string_view what_items) {
  std::vector<std::uint8_t> data;
  data.reserve(static_cast<std::size_t>(std::min(expected, kMaxReserveBytes)));
  advise_huge_pages(data);  // before the first write: pages are chosen when first touched
  while (data.size() < expected) {
    const std::size_t old_size = data.size();
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(expected - old_size, kChunkBytes));
    data.resize(old_size + want);
    const std::size_t got = in.read(data.data() + old_size, want);
    data.resize(old_size + got);
    if (got < want) break;
  }
  if (data.size() < expected) {
    fail(in.path(), fmt::format("truncated data: expected {} bytes of {} ({}), found {}", expected,
                                what_bytes, what_items, data.size()));
  }
  const std::uint64_t trailing = in.count_rest();
  if (trailing > 0) {
    fail(in.path(), fmt::format("trailing data: {} after the data; the header promises {} bytes of {} ({}), "
                                "expected the file to end there",
                                count_of(trailing, "byte"), expected, what_bytes, what_items));
  }
  return data;
}

void check_labels(const fs::path& path, const std::vector<std::uint8_t>& labels) {
  const auto bad =
      std::find_if(labels.begin(), labels.end(), [](std::uint8_t l) { return l >= kNumClasses; });
  if (bad == labels.end()) return;
  const auto bad_count =
      std::count_if(labels.begin(), labels.end(), [](std::uint8_t l) { return l >= kNumClasses; });
  fail(path, fmt::format(
                 "label {} at index {} is out of range: labels must be 0 to {} (out of range: {} of the {})",
                 *bad, bad - labels.begin(), kNumClasses - 1, bad_count, count_of(labels.size(), "label")));
}

void write_all(gzFile file, const fs::path& path, const std::uint8_t* data, std::size_t n) {
  while (n > 0) {
    const auto chunk = static_cast<unsigned>(std::min(n, kChunkBytes));
    if (gzwrite(file, data, chunk) != static_cast<int>(chunk)) {
      int errnum = Z_OK;
      const char* message = gzerror(file, &errnum);
      fail(path, fmt::format("write error: {}", errnum == Z_ERRNO ? errno_message(errno) : message));
    }
    data += chunk;
    n -= chunk;
  }
}

// Writes the parts one after the other, gzip-compressed or raw (zlib's transparent "T" mode), so that both
// kinds of file go through one code path.
void write_file(const fs::path& path, std::initializer_list<std::span<const std::uint8_t>> parts, bool gzip) {
  errno = 0;
  GzFile file(gzopen(path.c_str(), gzip ? "wb" : "wbT"));
  if (!file) {
    fail(path,
         fmt::format("cannot create the file: {}", errno != 0 ? errno_message(errno) : "out of memory"));
  }
  for (const std::span<const std::uint8_t> part : parts)
    write_all(file.get(), path, part.data(), part.size());
  // gzclose flushes the last compressed block: its result is the write's result.
  errno = 0;
  if (gzclose(file.release()) != Z_OK) {
    fail(path, fmt::format("write error on close: {}", errno != 0 ? errno_message(errno) : "zlib error"));
  }
}

void write_idx(const fs::path& path, const std::vector<std::uint32_t>& header,
               const std::vector<std::uint8_t>& data, bool gzip) {
  std::vector<std::uint8_t> header_bytes(4 * header.size());
  for (std::size_t i = 0; i < header.size(); ++i)
    store_be32(header_bytes.data() + 4 * i, header[i]);
  write_file(path, {header_bytes, data}, gzip);
}

}  // namespace

IdxImages read_idx_images(const fs::path& path) {
  IdxInput in(path);
  const std::vector<std::uint32_t> dims = read_header(in, kImagesKind);
  const std::uint32_t count = dims[0];
  if (dims[1] != kImageRows || dims[2] != kImageCols) {
    fail(path, fmt::format("wrong image size: the header says {}x{} images, expected {}x{}", dims[1], dims[2],
                           kImageRows, kImageCols));
  }
  check_count(in, count, "image");
  IdxImages images;
  images.pixels = read_payload(in, std::uint64_t{count} * kImagePixels, "pixel data",
                               fmt::format("{} images of {}x{}", count, kImageRows, kImageCols));
  images.count = static_cast<int>(count);
  images.rows = kImageRows;
  images.cols = kImageCols;
  return images;
}

std::vector<std::uint8_t> read_idx_labels(const fs::path& path) {
  IdxInput in(path);
  const std::uint32_t count = read_header(in, kLabelsKind)[0];
  check_count(in, count, "label");
  std::vector<std::uint8_t> labels = read_payload(in, count, "label data", fmt::format("{} labels", count));
  check_labels(path, labels);
  return labels;
}

void write_idx_images(const fs::path& path, const IdxImages& images, bool gzip) {
  if (images.count < 0 || images.rows < 0 || images.cols < 0 ||
      images.pixels.size() !=
          std::size_t(images.count) * std::size_t(images.rows) * std::size_t(images.cols)) {
    fail(path, fmt::format("cannot write {} images of {}x{} from {} pixels", images.count, images.rows,
                           images.cols, images.pixels.size()));
  }
  write_idx(path,
            {kIdxImagesMagic, static_cast<std::uint32_t>(images.count),
             static_cast<std::uint32_t>(images.rows), static_cast<std::uint32_t>(images.cols)},
            images.pixels, gzip);
}

void write_idx_labels(const fs::path& path, const std::vector<std::uint8_t>& labels, bool gzip) {
  if (labels.size() > kMaxItems) {
    fail(path, fmt::format("cannot write {} labels, at most {}", labels.size(), kMaxItems));
  }
  write_idx(path, {kIdxLabelsMagic, static_cast<std::uint32_t>(labels.size())}, labels, gzip);
}

void write_bytes(const fs::path& path, const std::vector<std::uint8_t>& bytes, bool gzip) {
  write_file(path, {bytes}, gzip);
}

}  // namespace mnistdp
