#include "host/checkpoint/checkpoint.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>

#include "host/checkpoint/file_io.hpp"
#include "host/checkpoint/messages.hpp"
#include "host/checkpoint/safetensors.hpp"
#include "host/model/params.hpp"

namespace mnistdp {

// The file format is little-endian; copying floats byte for byte is only right on a little-endian host.
static_assert(std::endian::native == std::endian::little, "checkpoint I/O assumes a little-endian host");
static_assert(sizeof(float) == 4);

namespace {

constexpr std::string_view kKeyVersion = "mnist_dp.format_version";
constexpr std::string_view kKeyEpoch = "mnist_dp.epoch";
constexpr std::string_view kKeyStep = "mnist_dp.step";
constexpr std::string_view kKeySeed = "mnist_dp.seed";
constexpr std::string_view kKeyFingerprint = "mnist_dp.data_fingerprint";
constexpr std::string_view kKeyMomentum = "mnist_dp.momentum";
constexpr std::array<std::string_view, 6> kReservedKeys = {kKeyVersion, kKeyEpoch,       kKeyStep,
                                                           kKeySeed,    kKeyFingerprint, kKeyMomentum};

struct TensorSpec {
  std::string_view name;
  std::size_t offset;  // into the flat buffer, in floats
  std::vector<std::uint64_t> shape;
  std::size_t count() const {
    std::size_t n = 1;
    for (std::uint64_t d : shape)
      n *= static_cast<std::size_t>(d);
    return n;
  }
};

const std::array<TensorSpec, 4>& simple_net_tensors() {
  using L = ParamLayout;
  static const std::array<TensorSpec, 4> specs = {{
      {"fc1.weight", L::kFc1Weight, {L::kHidden, L::kInput}},
      {"fc1.bias", L::kFc1Bias, {L::kHidden}},
      {"fc2.weight", L::kFc2Weight, {L::kClasses, L::kHidden}},
      {"fc2.bias", L::kFc2Bias, {L::kClasses}},
  }};
  return specs;
}

// "fc1.weight[3, 17]" for a flat index, so that a bad value can be found in PyTorch too.
std::string describe_index(std::size_t flat) {
  for (const TensorSpec& t : simple_net_tensors()) {
    if (flat < t.offset || flat >= t.offset + t.count()) continue;
    const std::size_t i = flat - t.offset;
    if (t.shape.size() == 1) return fmt::format("{}[{}]", t.name, i);
    return fmt::format("{}[{}, {}]", t.name, i / t.shape[1], i % t.shape[1]);
  }
  return fmt::format("index {}", flat);
}

std::optional<std::size_t> first_non_finite(std::span<const float> values) {
  for (std::size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i])) return i;
  return std::nullopt;
}

// ---- base64 (RFC 4648, standard alphabet, padded) ----

constexpr std::string_view kBase64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(std::span<const std::uint8_t> bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t v =
        (std::uint32_t{bytes[i]} << 16) | (std::uint32_t{bytes[i + 1]} << 8) | bytes[i + 2];
    for (int shift = 18; shift >= 0; shift -= 6)
      out += kBase64[(v >> shift) & 63];
  }
  if (const std::size_t rest = bytes.size() - i; rest > 0) {
    std::uint32_t v = std::uint32_t{bytes[i]} << 16;
    if (rest == 2) v |= std::uint32_t{bytes[i + 1]} << 8;
    out += kBase64[(v >> 18) & 63];
    out += kBase64[(v >> 12) & 63];
    out += rest == 2 ? kBase64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// Strict: the length is a multiple of 4, only the alphabet, '=' only as the last one or two characters.
std::optional<std::vector<std::uint8_t>> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::array<int, 256> value{};
  value.fill(-1);
  for (std::size_t i = 0; i < kBase64.size(); ++i)
    value[static_cast<unsigned char>(kBase64[i])] = static_cast<int>(i);
  std::vector<std::uint8_t> out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int padding = 0;
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const auto c = static_cast<unsigned char>(text[i + k]);
      if (c == '=' && last && k >= 2 && (k == 3 || text[i + 3] == '=')) {
        ++padding;
        v <<= 6;
        continue;
      }
      if (value[c] < 0 || padding > 0) return std::nullopt;
      v = (v << 6) | static_cast<std::uint32_t>(value[c]);
    }
    out.push_back(static_cast<std::uint8_t>(v >> 16));
    if (padding < 2) out.push_back(static_cast<std::uint8_t>(v >> 8));
    if (padding < 1) out.push_back(static_cast<std::uint8_t>(v));
  }
  return out;
}

// ---- reading ----

template <typename T>
T parse_decimal(const std::map<std::string, std::string>& metadata, std::string_view key,
                std::string_view name) {
  const auto it = metadata.find(std::string(key));
  if (it == metadata.end()) return T{0};
  const std::string& text = it->second;
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  bool negative = false;
  if constexpr (std::is_signed_v<T>) negative = value < 0;
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || negative)
    fail(name, "metadata {} is \"{}\", not a non-negative integer", key, printable(text));
  return value;
}

std::uint64_t parse_hex(const std::map<std::string, std::string>& metadata, std::string_view key,
                        std::string_view name) {
  const auto it = metadata.find(std::string(key));
  if (it == metadata.end()) return 0;
  const std::string& text = it->second;
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  if (text.empty() || text.size() > 16 || error != std::errc() || end != text.data() + text.size())
    fail(name, "metadata {} is \"{}\", not a 64-bit hexadecimal number", key, printable(text));
  return value;
}

std::vector<float> floats_from_bytes(std::span<const std::uint8_t> bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

void read_training_state(Checkpoint& c, std::map<std::string, std::string> metadata, std::string_view name) {
  const auto version = metadata.find(std::string(kKeyVersion));
  if (version == metadata.end()) {
    c.extra = std::move(metadata);  // a file from elsewhere: its metadata means nothing to us
    return;
  }
  if (version->second != std::to_string(kCheckpointFormatVersion))
    fail(name, "checkpoint format_version is \"{}\"; this build of mnist-dp reads version {}",
         printable(version->second), kCheckpointFormatVersion);
  c.has_training_state = true;
  c.epoch = parse_decimal<int>(metadata, kKeyEpoch, name);
  c.step = parse_decimal<long>(metadata, kKeyStep, name);
  c.seed = parse_decimal<std::uint64_t>(metadata, kKeySeed, name);
  c.data_fingerprint = parse_hex(metadata, kKeyFingerprint, name);
  if (const auto m = metadata.find(std::string(kKeyMomentum)); m != metadata.end()) {
    const std::optional<std::vector<std::uint8_t>> bytes = base64_decode(m->second);
    if (!bytes) fail(name, "metadata {} is not valid base64", kKeyMomentum);
    if (bytes->size() != ParamLayout::kCount * sizeof(float))
      fail(name, "metadata {} holds {} bytes; SimpleNet's momentum is {} float32 values ({} bytes)",
           kKeyMomentum, bytes->size(), ParamLayout::kCount, ParamLayout::kCount * sizeof(float));
    c.momentum = floats_from_bytes(*bytes);
    if (const auto bad = first_non_finite(*c.momentum))
      fail(name, "the momentum of {} is {}", describe_index(*bad), (*c.momentum)[*bad]);
  }
  for (std::string_view key : kReservedKeys)
    metadata.erase(std::string(key));
  c.extra = std::move(metadata);
}

Checkpoint parse(const safetensors::ByteSource& source, std::string_view name) {
  safetensors::Header header = safetensors::read_header(source, name);
  const std::vector<safetensors::TensorEntry>& entries = header.tensors;

  const auto& specs = simple_net_tensors();
  std::array<const safetensors::TensorEntry*, 4> found{};
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& spec = specs[i];
    const auto it = std::find_if(entries.begin(), entries.end(),
                                 [&](const safetensors::TensorEntry& e) { return e.name == spec.name; });
    if (it == entries.end())
      fail(name,
           "tensor {} is missing (a SimpleNet checkpoint holds fc1.weight, fc1.bias, fc2.weight, fc2.bias)",
           spec.name);
    if (it->dtype != "F32") fail(name, "tensor {} has dtype {}; only F32 is accepted", spec.name, it->dtype);
    if (it->shape != spec.shape) {
      const bool transposed = spec.shape.size() == 2 && it->shape.size() == 2 &&
                              it->shape[0] == spec.shape[1] && it->shape[1] == spec.shape[0];
      fail(name, "tensor {} has shape [{}]; SimpleNet's is [{}]{}", spec.name, fmt::join(it->shape, ", "),
           fmt::join(spec.shape, ", "), transposed ? " (transposed? nn.Linear stores [out, in])" : "");
    }
    found[i] = &*it;
  }

  safetensors::check_coverage(entries, header.data_size, name);

  Checkpoint c;
  c.params.resize(ParamLayout::kCount);
  for (std::size_t i = 0; i < specs.size(); ++i)
    source.read(header.data_start + found[i]->begin,
                std::span(reinterpret_cast<std::uint8_t*>(c.params.data() + specs[i].offset),
                          specs[i].count() * sizeof(float)));
  if (const auto bad = first_non_finite(c.params))
    fail(name, "{} is {}", describe_index(*bad), c.params[*bad]);

  read_training_state(c, std::move(header.metadata), name);
  return c;
}

// ---- writing ----

std::vector<std::uint8_t> serialize(const Checkpoint& c, std::string_view name) {
  if (c.params.size() != ParamLayout::kCount)
    throw std::invalid_argument(fmt::format("checkpoint: params holds {} values, SimpleNet has {}",
                                            c.params.size(), ParamLayout::kCount));
  if (c.momentum && c.momentum->size() != ParamLayout::kCount)
    throw std::invalid_argument(fmt::format("checkpoint: momentum holds {} values, SimpleNet has {}",
                                            c.momentum->size(), ParamLayout::kCount));
  if (c.epoch < 0 || c.step < 0)
    throw std::invalid_argument("checkpoint: epoch and step must be non-negative");
  for (std::string_view key : kReservedKeys)
    if (c.extra.contains(std::string(key)))
      throw std::invalid_argument(fmt::format("checkpoint: metadata key {} is reserved for mnist-dp", key));
  if (c.extra.contains(std::string(safetensors::kMetadataKey)))
    throw std::invalid_argument("checkpoint: __metadata__ cannot be a metadata key");
  if (const auto bad = first_non_finite(c.params))
    fail(name, "not saved: {} is {} (the run has diverged; the previous checkpoint is kept)",
         describe_index(*bad), c.params[*bad]);
  if (c.momentum)
    if (const auto bad = first_non_finite(*c.momentum))
      fail(name, "not saved: the momentum of {} is {} (the previous checkpoint is kept)",
           describe_index(*bad), (*c.momentum)[*bad]);

  std::map<std::string, std::string> metadata = c.extra;
  metadata.emplace(kKeyVersion, std::to_string(kCheckpointFormatVersion));
  metadata.emplace(kKeyEpoch, std::to_string(c.epoch));
  metadata.emplace(kKeyStep, std::to_string(c.step));
  metadata.emplace(kKeySeed, std::to_string(c.seed));
  metadata.emplace(kKeyFingerprint, fmt::format("{:016x}", c.data_fingerprint));
  if (c.momentum)
    metadata.emplace(kKeyMomentum,
                     base64_encode(std::span(reinterpret_cast<const std::uint8_t*>(c.momentum->data()),
                                             c.momentum->size() * sizeof(float))));

  // The tensors in data order, so that the data section is the flat parameter buffer.
  std::vector<safetensors::TensorEntry> tensors;
  for (const TensorSpec& t : simple_net_tensors()) {
    const std::uint64_t begin = t.offset * sizeof(float);
    tensors.push_back({std::string(t.name), "F32", t.shape, begin, begin + t.count() * sizeof(float)});
  }
  return safetensors::serialize(
      metadata, tensors,
      std::span(reinterpret_cast<const std::uint8_t*>(c.params.data()), c.params.size() * sizeof(float)));
}

}  // namespace

std::vector<std::uint8_t> serialize_checkpoint(const Checkpoint& checkpoint) {
  return serialize(checkpoint, "checkpoint");
}

void save_checkpoint(const std::filesystem::path& path, const Checkpoint& checkpoint) {
  const std::vector<std::uint8_t> bytes = serialize(checkpoint, path.string());
  file_io::write_atomically(path, bytes);
  file_io::remove_abandoned_temporaries(path);
}

Checkpoint load_checkpoint(const std::filesystem::path& path) {
  const std::string name = path.string();
  const std::unique_ptr<safetensors::ByteSource> source = file_io::open_for_reading(path, name);
  return parse(*source, name);
}

Checkpoint parse_checkpoint(std::span<const std::uint8_t> bytes, std::string_view name) {
  const safetensors::MemorySource source(bytes);
  return parse(source, name);
}

}  // namespace mnistdp
