#pragma once
// The safetensors format, as its reference implementation writes and reads it (the layout is drawn in
// checkpoint.hpp): an 8-byte header length, a JSON header, then the data. This file knows the format and
// nothing of what a checkpoint holds; checkpoint.cpp decides which tensors and metadata must be there.
//
// What a reader here accepts, following the reference implementation where it has a rule: a header of at
// most kMaxHeaderBytes; valid JSON, no deeper than a real header nests and with no key twice in one object;
// string metadata; every tensor of a dtype the specification lists, whose shape needs exactly the bytes its
// data_offsets hold; and (check_coverage) every byte of the data in exactly one tensor. Everything refused
// throws CheckpointError, its message starting with the name given for the file.
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mnistdp::safetensors {

// The reference implementation's limit, and ours: a header this large is a corrupt file, not a model.
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

// The header's one key that is not a tensor.
inline constexpr std::string_view kMetadataKey = "__metadata__";

// Where a file's bytes come from: a file on disk, read piece by piece as the reader asks for them, so that a
// file of gigabytes that is not a checkpoint is refused without being read (file_io.hpp); or memory.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual std::uint64_t size() const = 0;
  // Fills `out` from `offset`; offset + out.size() <= size() is checked by the caller.
  virtual void read(std::uint64_t offset, std::span<std::uint8_t> out) const = 0;
};

class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
  std::uint64_t size() const override { return bytes_.size(); }
  void read(std::uint64_t offset, std::span<std::uint8_t> out) const override {
    if (out.empty()) return;  // memcpy with a null pointer is undefined even for no bytes
    std::memcpy(out.data(), bytes_.data() + offset, out.size());
  }

 private:
  std::span<const std::uint8_t> bytes_;
};

// One tensor of the header: data_offsets are [begin, end) relative to the start of the data.
struct TensorEntry {
  std::string name;
  std::string dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

struct Header {
  std::map<std::string, std::string> metadata;  // __metadata__
  std::vector<TensorEntry> tensors;             // in the header's order
  std::uint64_t data_start = 0;                 // where the data begins in the file
  std::uint64_t data_size = 0;                  // from there to the end of the file
};

// Reads the header length and the header, and checks each tensor on its own. How the tensors lie in the
// data together is left to check_coverage, so that a reader can first say which tensor it misses or finds
// misshapen: the more useful message for a file that is not the model it expects.
Header read_header(const ByteSource& source, std::string_view name);

// Every byte of the data belongs to exactly one tensor, as the reference implementation requires.
void check_coverage(std::vector<TensorEntry> entries, std::uint64_t data_size, std::string_view name);

// The whole file: `metadata`, then `tensors` in the order given, each as dtype, shape, data_offsets, as
// the reference writer orders them; the header padded with spaces to a multiple of 8 bytes, so that the
// data starts 8-byte aligned; then `data`. Throws std::invalid_argument when a metadata key or value is
// not valid UTF-8.
std::vector<std::uint8_t> serialize(const std::map<std::string, std::string>& metadata,
                                    const std::vector<TensorEntry>& tensors,
                                    std::span<const std::uint8_t> data);

}  // namespace mnistdp::safetensors
