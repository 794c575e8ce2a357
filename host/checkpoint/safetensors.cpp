#include "host/checkpoint/safetensors.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>

#include "host/checkpoint/messages.hpp"

namespace mnistdp::safetensors {

namespace {

using Json = nlohmann::json;

// The safetensors header of a real file nests three deep (root, tensor entry, shape). The limit stops a
// header of a hundred million '[' from building a hundred million nested values before it is refused.
constexpr int kMaxJsonDepth = 8;

// Bits per element of every dtype the safetensors specification lists; a tensor of any of them may sit in a
// file beside the ones a reader wants, and its size is checked like theirs.
std::optional<std::uint64_t> dtype_bits(std::string_view dtype) {
  static constexpr std::array<std::pair<std::string_view, std::uint64_t>, 20> kBits = {{
      {"BOOL", 8}, {"U8", 8},   {"I8", 8},    {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"I16", 16},
      {"U16", 16}, {"F16", 16}, {"BF16", 16}, {"I32", 32},    {"U32", 32},    {"F32", 32},    {"F64", 64},
      {"I64", 64}, {"U64", 64}, {"C64", 64},  {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6},
  }};
  for (const auto& [name, bits] : kBits)
    if (name == dtype) return bits;
  return std::nullopt;
}

struct JsonLimitExceeded {
  std::string message;
};

Json parse_header_json(std::string_view text, std::string_view name) {
  // One set of keys per open object, to refuse duplicates that the JSON parser would silently merge.
  std::vector<std::set<std::string>> open_objects;
  const Json::parser_callback_t callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        open_objects.emplace_back();
        [[fallthrough]];
      case Json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth)
          throw JsonLimitExceeded{fmt::format("nests deeper than {} levels", kMaxJsonDepth)};
        break;
      case Json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!open_objects.empty() && parsed.is_string() &&
            !open_objects.back().insert(parsed.get_ref<const std::string&>()).second)
          throw JsonLimitExceeded{fmt::format("has the key \"{}\" twice in one object",
                                              printable(parsed.get_ref<const std::string&>()))};
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const JsonLimitExceeded& e) {
    fail(name, "the header is not a valid safetensors header: it {}", e.message);
  } catch (const Json::exception& e) {
    fail(name, "the header is not valid JSON: {}", e.what());
  }
}

TensorEntry parse_tensor_entry(const std::string& tensor, const Json& entry, std::string_view name) {
  const std::string shown = printable(tensor);
  if (!entry.is_object())
    fail(name, "header entry \"{}\" is a JSON {}, not a tensor description (an object)", shown,
         entry.type_name());
  TensorEntry t;
  t.name = tensor;

  const auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) fail(name, "tensor {} has no dtype string", shown);
  t.dtype = dtype->get<std::string>();

  const auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) fail(name, "tensor {} has no shape list", shown);
  for (const Json& d : *shape) {
    if (!d.is_number_unsigned())
      fail(name, "tensor {}: shape must be a list of non-negative integers, found {}", shown, d.type_name());
    t.shape.push_back(d.get<std::uint64_t>());
  }

  const auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned())
    fail(name, "tensor {}: data_offsets must be two non-negative integers [begin, end]", shown);
  t.begin = (*offsets)[0].get<std::uint64_t>();
  t.end = (*offsets)[1].get<std::uint64_t>();
  if (t.end < t.begin)
    fail(name, "tensor {}: data_offsets [{}, {}] end before they begin", shown, t.begin, t.end);

  const std::optional<std::uint64_t> bits = dtype_bits(t.dtype);
  if (!bits)
    fail(name, "tensor {} has dtype {}, which safetensors does not define", shown, printable(t.dtype));
  std::uint64_t total_bits = *bits;
  for (std::uint64_t d : t.shape)
    if (__builtin_mul_overflow(total_bits, d, &total_bits))
      fail(name, "tensor {}: shape [{}] is impossibly large", shown, fmt::join(t.shape, ", "));
  if (total_bits % 8 != 0)
    fail(name, "tensor {}: shape [{}] of {} is {} bits, not a whole number of bytes", shown,
         fmt::join(t.shape, ", "), t.dtype, total_bits);
  if (total_bits / 8 != t.end - t.begin)
    fail(name, "tensor {}: data_offsets [{}, {}] hold {} bytes, but shape [{}] of {} needs {}", shown,
         t.begin, t.end, t.end - t.begin, fmt::join(t.shape, ", "), t.dtype, total_bits / 8);
  return t;
}

}  // namespace

Header read_header(const ByteSource& source, std::string_view name) {
  const std::uint64_t file_size = source.size();
  if (file_size < 8)
    fail(name, "the file is {} bytes, shorter than the 8-byte header length a safetensors file starts with",
         file_size);
  std::array<std::uint8_t, 8> prefix{};
  source.read(0, prefix);
  std::uint64_t header_size = 0;
  for (std::size_t i = 0; i < prefix.size(); ++i)
    header_size |= std::uint64_t{prefix[i]} << (8 * i);
  if (header_size > kMaxHeaderBytes)
    fail(name,
         "the header length says {} bytes, over the 100 MB limit: not a safetensors file, or a corrupt one",
         header_size);
  if (header_size > file_size - 8)
    fail(name,
         "the header length says {} bytes, but only {} follow it: the file is truncated, or not safetensors",
         header_size, file_size - 8);

  std::string header_text(static_cast<std::size_t>(header_size), '\0');
  source.read(8, std::span(reinterpret_cast<std::uint8_t*>(header_text.data()), header_text.size()));
  const Json header = parse_header_json(header_text, name);
  if (!header.is_object()) fail(name, "the header is a JSON {}, not an object", header.type_name());

  std::map<std::string, std::string> metadata;
  std::vector<TensorEntry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      if (!value.is_object())
        fail(name, "__metadata__ is a JSON {}, not an object of strings", value.type_name());
      for (const auto& [meta_key, meta_value] : value.items()) {
        if (!meta_value.is_string())
          fail(name, "__metadata__ \"{}\" is a JSON {}; safetensors metadata values are strings",
               printable(meta_key), meta_value.type_name());
        metadata.emplace(meta_key, meta_value.get<std::string>());
      }
      continue;
    }
    entries.push_back(parse_tensor_entry(key, value, name));
  }

  const std::uint64_t data_start = 8 + header_size;
  return Header{std::move(metadata), std::move(entries), data_start, file_size - data_start};
}

void check_coverage(std::vector<TensorEntry> entries, std::uint64_t data_size, std::string_view name) {
  for (const TensorEntry& t : entries)
    if (t.end > data_size)
      fail(name,
           "tensor {}: data_offsets [{}, {}] run past the end of the data ({} bytes): the file is truncated",
           printable(t.name), t.begin, t.end, data_size);
  std::sort(entries.begin(), entries.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  std::uint64_t covered = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& t : entries) {
    if (t.begin < covered)
      fail(name, "tensors {} and {} overlap (bytes {} to {} of the data)", printable(previous->name),
           printable(t.name), t.begin, covered);
    if (t.begin > covered) fail(name, "bytes {} to {} of the data belong to no tensor", covered, t.begin);
    covered = t.end;
    previous = &t;
  }
  if (covered < data_size)
    fail(name,
         "{} bytes after the last tensor; safetensors allows none (a file appended to, or not a checkpoint)",
         data_size - covered);
}

std::vector<std::uint8_t> serialize(const std::map<std::string, std::string>& metadata,
                                    const std::vector<TensorEntry>& tensors,
                                    std::span<const std::uint8_t> data) {
  // ordered_json keeps the order of insertion: __metadata__ first, then the tensors as given.
  nlohmann::ordered_json header;
  header[std::string(kMetadataKey)] = metadata;
  for (const TensorEntry& t : tensors)
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::exception&) {
    throw std::invalid_argument("checkpoint: a metadata key or value is not valid UTF-8");
  }
  // Spaces up to a multiple of 8, as the reference does, so the data starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');

  std::vector<std::uint8_t> out(8 + text.size() + data.size());
  for (std::size_t i = 0; i < 8; ++i)
    out[i] = static_cast<std::uint8_t>(std::uint64_t{text.size()} >> (8 * i));
  std::memcpy(out.data() + 8, text.data(), text.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + text.size(), data.data(), data.size());
  return out;
}

}  // namespace mnistdp::safetensors
