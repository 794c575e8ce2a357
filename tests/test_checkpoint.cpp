// Checkpoints: the safetensors layout byte for byte, round trips, every kind of malformed file, atomic saves
// (including a writer killed at random moments), and a small fuzz of truncations and byte flips.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "host/checkpoint/checkpoint.hpp"
#include "host/model/params.hpp"
#include "temp_dir.hpp"

namespace mnistdp {
namespace {

using Bytes = std::vector<std::uint8_t>;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

// Values that are exact in float32 and differ from tensor to tensor, so a mixed-up layout shows.
std::vector<float> pattern(std::uint64_t seed) {
  std::vector<float> v(ParamLayout::kCount);
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(static_cast<long>((i * 2654435761u + seed) % 2001) - 1000) / 4096.0f;
  return v;
}

Checkpoint sample(bool with_momentum) {
  Checkpoint c;
  c.params = pattern(1);
  if (with_momentum) c.momentum = pattern(2);
  c.epoch = 3;
  c.step = 2814;
  c.seed = 42;
  c.data_fingerprint = 0x0123456789abcdefull;
  c.extra = {{"note", "hi"}};
  return c;
}

// Compared as one bool: on a failure Catch would otherwise print all 814,000 bytes or 203,530 values.
template <typename T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
  return a == b;
}

Bytes read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_file(const std::filesystem::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

Bytes le64(std::uint64_t v) {
  Bytes b(8);
  for (int i = 0; i < 8; ++i)
    b[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v >> (8 * i));
  return b;
}

// A safetensors file from a header written out by hand, padded as the reference pads it.
Bytes make_file(std::string header, const Bytes& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  // Sized once and filled: GCC 12 misreads inserts into a fresh vector as out of bounds (-Warray-bounds).
  Bytes out(8 + header.size() + data.size());
  const Bytes length = le64(header.size());
  std::copy(length.begin(), length.end(), out.begin());
  std::copy(header.begin(), header.end(), out.begin() + 8);
  std::copy(data.begin(), data.end(), out.begin() + 8 + static_cast<long>(header.size()));
  return out;
}

Bytes float_bytes(const std::vector<float>& v) {
  Bytes b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

struct Entry {
  std::string name, dtype, shape, offsets;
};

// SimpleNet's four tensors as PyTorch's save_file lays them out (sorted by name: biases first), no metadata.
std::vector<Entry> torch_entries() {
  return {{"fc1.bias", "F32", "[256]", "[0,1024]"},
          {"fc1.weight", "F32", "[256,784]", "[1024,803840]"},
          {"fc2.bias", "F32", "[10]", "[803840,803880]"},
          {"fc2.weight", "F32", "[10,256]", "[803880,814120]"}};
}

std::string header_of(const std::vector<Entry>& entries, const std::string& metadata = "") {
  std::string h = "{";
  if (!metadata.empty()) h += "\"__metadata__\":" + metadata;
  for (const Entry& e : entries) {
    if (h.size() > 1) h += ",";
    h += fmt::format(R"("{}":{{"dtype":"{}","shape":{},"data_offsets":{}}})", e.name, e.dtype, e.shape,
                     e.offsets);
  }
  return h + "}";
}

// The data section of torch_entries(): params regrouped into the sorted order.
Bytes torch_data(const std::vector<float>& p) {
  using L = ParamLayout;
  std::vector<float> d;
  d.insert(d.end(), p.begin() + L::kFc1Bias, p.begin() + L::kFc2Weight);
  d.insert(d.end(), p.begin() + L::kFc1Weight, p.begin() + L::kFc1Bias);
  d.insert(d.end(), p.begin() + L::kFc2Bias, p.begin() + L::kCount);
  d.insert(d.end(), p.begin() + L::kFc2Weight, p.begin() + L::kFc2Bias);
  return float_bytes(d);
}

Bytes torch_file(const std::vector<Entry>& entries, std::size_t data_size = 814120,
                 const std::string& meta = "") {
  Bytes data = torch_data(pattern(1));
  data.resize(data_size, 0);
  return make_file(header_of(entries, meta), data);
}

constexpr const char* kName = "bad.safetensors";

void require_error(const Bytes& bytes, const std::string& message) {
  INFO("expected: " << message);
  REQUIRE_THROWS_MATCHES(parse_checkpoint(bytes, kName), CheckpointError,
                         Catch::Matchers::Predicate<CheckpointError>(
                             [&](const CheckpointError& e) {
                               const std::string what = e.what();
                               return what.rfind(std::string(kName) + ": ", 0) == 0 &&
                                      what.find(message) != std::string::npos;
                             },
                             "starts with the file name and says: " + message));
}

// ---- round trips and layout ----

TEST_CASE("checkpoint round trip without momentum", "[checkpoint]") {
  test::TempDir dir;
  const Checkpoint c = sample(false);
  save_checkpoint(dir / "a.safetensors", c);
  const Checkpoint r = load_checkpoint(dir / "a.safetensors");
  REQUIRE(same(r.params, c.params));
  REQUIRE_FALSE(r.momentum.has_value());
  REQUIRE(r.epoch == 3);
  REQUIRE(r.step == 2814);
  REQUIRE(r.seed == 42);
  REQUIRE(r.data_fingerprint == 0x0123456789abcdefull);
  REQUIRE(r.extra == c.extra);
  REQUIRE(r.has_training_state);
}

TEST_CASE("checkpoint round trip with momentum and extreme metadata", "[checkpoint]") {
  test::TempDir dir;
  Checkpoint c = sample(true);
  c.seed = ~std::uint64_t{0};
  c.data_fingerprint = ~std::uint64_t{0};
  c.step = 1L << 40;
  c.extra = {{"lr", "0.01"}, {"unicode", "\xc3\xa9t\xc3\xa9"}, {"empty", ""}};
  (*c.momentum)[0] = -0.0f;
  (*c.momentum)[1] = 1e-45f;  // a denormal survives base64 bit for bit
  save_checkpoint(dir / "b.safetensors", c);
  const Checkpoint r = load_checkpoint(dir / "b.safetensors");
  REQUIRE(same(r.params, c.params));
  REQUIRE(r.momentum.has_value());
  REQUIRE(std::memcmp(r.momentum->data(), c.momentum->data(), ParamLayout::kCount * sizeof(float)) == 0);
  REQUIRE(r.seed == c.seed);
  REQUIRE(r.data_fingerprint == c.data_fingerprint);
  REQUIRE(r.step == c.step);
  REQUIRE(r.extra == c.extra);
}

TEST_CASE("checkpoint header matches a file written out by hand, byte for byte", "[checkpoint]") {
  const Checkpoint c = sample(false);
  const std::string header =
      R"({"__metadata__":{"mnist_dp.data_fingerprint":"0123456789abcdef","mnist_dp.epoch":"3",)"
      R"("mnist_dp.format_version":"1","mnist_dp.seed":"42","mnist_dp.step":"2814","note":"hi"},)"
      R"("fc1.weight":{"dtype":"F32","shape":[256,784],"data_offsets":[0,802816]},)"
      R"("fc1.bias":{"dtype":"F32","shape":[256],"data_offsets":[802816,803840]},)"
      R"("fc2.weight":{"dtype":"F32","shape":[10,256],"data_offsets":[803840,814080]},)"
      R"("fc2.bias":{"dtype":"F32","shape":[10],"data_offsets":[814080,814120]}})";
  REQUIRE(header.size() == 465);  // 7 spaces of padding make 472, a multiple of 8
  // The flat buffer is the data section, unchanged.
  const Bytes expected = make_file(header, float_bytes(c.params));
  REQUIRE(Bytes(expected.begin(), expected.begin() + 8) == Bytes{0xd8, 0x01, 0, 0, 0, 0, 0, 0});  // 472
  REQUIRE(std::string(expected.begin() + 8 + 465, expected.begin() + 8 + 472) == "       ");

  const Bytes written = serialize_checkpoint(c);
  REQUIRE(written.size() == expected.size());
  REQUIRE(same(written, expected));

  test::TempDir dir;
  save_checkpoint(dir / "c.safetensors", c);
  REQUIRE(same(read_file(dir / "c.safetensors"), expected));
}

TEST_CASE("checkpoint reads files laid out as PyTorch's safetensors writes them", "[checkpoint]") {
  SECTION("sorted names, no metadata: parameters only") {
    const Checkpoint r = parse_checkpoint(torch_file(torch_entries()), "torch.safetensors");
    REQUIRE(same(r.params, pattern(1)));
    REQUIRE_FALSE(r.has_training_state);
    REQUIRE_FALSE(r.momentum.has_value());
    REQUIRE(r.epoch == 0);
    REQUIRE(r.extra.empty());
  }
  SECTION("foreign metadata is kept as extra, never read as training state") {
    const Checkpoint r = parse_checkpoint(
        torch_file(torch_entries(), 814120, R"({"format":"pt","mnist_dp.epoch":"x"})"), "torch.safetensors");
    REQUIRE_FALSE(r.has_training_state);
    REQUIRE(r.extra.at("format") == "pt");
    REQUIRE(r.extra.at("mnist_dp.epoch") == "x");
  }
  SECTION("other tensors of other dtypes are checked and ignored") {
    auto entries = torch_entries();
    entries.push_back({"steps", "I64", "[]", "[814120,814128]"});
    entries.push_back({"mask", "BOOL", "[3]", "[814128,814131]"});
    entries.push_back({"empty", "F16", "[0,5]", "[814131,814131]"});
    const Checkpoint r = parse_checkpoint(torch_file(entries, 814131), "more.safetensors");
    REQUIRE(same(r.params, pattern(1)));
  }
  SECTION("an unpadded header and whitespace around the JSON") {
    std::string h = "  \n" + header_of(torch_entries()) + "\t";
    const Checkpoint r = parse_checkpoint(make_file(h, torch_data(pattern(1)), false), "ws.safetensors");
    REQUIRE(same(r.params, pattern(1)));
  }
}

// ---- malformed files ----

TEST_CASE("checkpoint: a missing file, a folder", "[checkpoint]") {
  test::TempDir dir;
  REQUIRE_THROWS_MATCHES(load_checkpoint(dir / "none.safetensors"), CheckpointError,
                         Catch::Matchers::Message((dir / "none.safetensors").string() + ": no such file"));
  REQUIRE_THROWS_WITH(load_checkpoint(dir.path()), StartsWith(dir.path().string() + ": ") &&
                                                       Contains("is a folder, not a checkpoint file"));
  // A malformed file on disk takes the same checks as bytes in memory.
  Bytes cut = serialize_checkpoint(sample(false));
  cut.pop_back();
  write_file(dir / "cut.safetensors", cut);
  REQUIRE_THROWS_WITH(
      load_checkpoint(dir / "cut.safetensors"),
      StartsWith((dir / "cut.safetensors").string() +
                 ": tensor fc2.bias: data_offsets [814080, 814120] run past the end of the data "
                 "(814119 bytes)"));
}

TEST_CASE("checkpoint: the length prefix", "[checkpoint]") {
  require_error({}, "the file is 0 bytes, shorter than the 8-byte header length");
  require_error(Bytes(7, 0), "the file is 7 bytes, shorter than the 8-byte header length");
  Bytes past(50, ' ');
  const Bytes length = le64(100);
  std::copy(length.begin(), length.end(), past.begin());
  require_error(past, "the header length says 100 bytes, but only 42 follow it");
  require_error(le64(100'000'001), "the header length says 100000001 bytes, over the 100 MB limit");
  require_error(le64(~std::uint64_t{0}), "over the 100 MB limit");
  // A text file: its first 8 characters read as a length are absurd.
  const std::string text = "{\"fc1.weight\": 1}";
  require_error(Bytes(text.begin(), text.end()), "over the 100 MB limit");
}

TEST_CASE("checkpoint: the JSON header", "[checkpoint]") {
  require_error(make_file("", {}), "the header is not valid JSON");
  require_error(make_file("{\"fc1.weight\": ", {}), "the header is not valid JSON");
  require_error(make_file("{} trailing", {}), "the header is not valid JSON");
  require_error(make_file("{\"a\":1e999}", {}), "the header is not valid JSON");
  require_error(make_file("{\"a\":\"\xff\"}", {}), "the header is not valid JSON");
  require_error(make_file("[1, 2]", {}), "the header is a JSON array, not an object");
  require_error(make_file("\"x\"", {}), "the header is a JSON string, not an object");
  require_error(make_file(std::string(100, '[') + std::string(100, ']'), {}), "nests deeper than 8 levels");
  require_error(make_file(R"({"__metadata__":{"a":{"b":{"c":{"d":{"e":{"f":{"g":{}}}}}}}}})", {}),
                "nests deeper than 8 levels");
  require_error(make_file(R"({"__metadata__":[]})", {}),
                "__metadata__ is a JSON array, not an object of strings");
  require_error(make_file(R"({"__metadata__":{"epoch":3}})", {}),
                "__metadata__ \"epoch\" is a JSON number; safetensors metadata values are strings");
  auto entries = torch_entries();
  entries.push_back(entries[0]);
  require_error(torch_file(entries), "has the key \"fc1.bias\" twice in one object");
  require_error(make_file(R"({"__metadata__":{"a":"1","a":"2"}})", {}), "has the key \"a\" twice");
}

TEST_CASE("checkpoint: tensor entries", "[checkpoint]") {
  SECTION("missing tensors are named") {
    for (std::size_t drop = 0; drop < 4; ++drop) {
      auto entries = torch_entries();
      const std::string name = entries[drop].name;
      entries.erase(entries.begin() + static_cast<long>(drop));
      require_error(torch_file(entries), "tensor " + name + " is missing");
    }
  }
  SECTION("dtype") {
    auto entries = torch_entries();
    entries[3] = {"fc2.weight", "F64", "[10,256]", "[803880,824360]"};
    require_error(torch_file(entries, 824360), "tensor fc2.weight has dtype F64; only F32 is accepted");
    entries = torch_entries();
    entries[0] = {"fc1.bias", "I32", "[256]", "[0,1024]"};
    require_error(torch_file(entries), "tensor fc1.bias has dtype I32; only F32 is accepted");
    entries = torch_entries();
    entries.push_back({"x", "F128", "[1]", "[814120,814136]"});
    require_error(torch_file(entries, 814136), "tensor x has dtype F128, which safetensors does not define");
    entries.back() = {"x", "F4", "[3]", "[814120,814122]"};
    require_error(torch_file(entries, 814122),
                  "tensor x: shape [3] of F4 is 12 bits, not a whole number of bytes");
    entries.back() = {"x", "F4", "[4]", "[814120,814122]"};
    REQUIRE_NOTHROW(parse_checkpoint(torch_file(entries, 814122), "f4"));
  }
  SECTION("shape") {
    auto entries = torch_entries();
    entries[1].shape = "[784,256]";
    require_error(torch_file(entries),
                  "tensor fc1.weight has shape [784, 256]; SimpleNet's is [256, 784] (transposed? nn.Linear");
    entries = torch_entries();
    entries[1].shape = "[200704]";
    require_error(torch_file(entries), "tensor fc1.weight has shape [200704]; SimpleNet's is [256, 784]");
    entries = torch_entries();
    entries[2] = {"fc2.bias", "F32", "[1,10]", "[803840,803880]"};
    require_error(torch_file(entries), "tensor fc2.bias has shape [1, 10]; SimpleNet's is [10]");
    entries = torch_entries();
    entries[2].shape = "[-10]";
    require_error(torch_file(entries), "tensor fc2.bias: shape must be a list of non-negative integers");
    entries[2].shape = "[10.0]";
    require_error(torch_file(entries), "tensor fc2.bias: shape must be a list of non-negative integers");
    entries[2].shape = "10";
    require_error(torch_file(entries), "tensor fc2.bias has no shape list");
    entries = torch_entries();
    entries.push_back({"huge", "F32", "[4294967296,4294967296]", "[814120,814120]"});
    require_error(torch_file(entries), "tensor huge: shape [4294967296, 4294967296] is impossibly large");
  }
  SECTION("data_offsets") {
    for (const char* bad :
         {"[0]", "[0,1024,2048]", "[\"0\",1024]", "[0.0,1024]", "[-4,1024]", "null", "{}"}) {
      auto entries = torch_entries();
      entries[0].offsets = bad;
      INFO(bad);
      require_error(torch_file(entries), "tensor fc1.bias: data_offsets must be two non-negative integers");
    }
    auto entries = torch_entries();
    entries[0].offsets = "[1024,0]";
    require_error(torch_file(entries), "tensor fc1.bias: data_offsets [1024, 0] end before they begin");
  }
  SECTION("size against shape") {
    auto entries = torch_entries();
    entries[0].offsets = "[0,1020]";
    require_error(
        torch_file(entries),
        "tensor fc1.bias: data_offsets [0, 1020] hold 1020 bytes, but shape [256] of F32 needs 1024");
  }
  SECTION("an entry that is not an object, or lacks a dtype") {
    require_error(make_file(R"({"fc1.weight":[1,2]})", {}), "header entry \"fc1.weight\" is a JSON array");
    require_error(make_file(R"({"fc1.weight":{"shape":[1],"data_offsets":[0,4]}})", Bytes(4)),
                  "tensor fc1.weight has no dtype string");
    require_error(make_file("{\"a\\u0001b\":7}", {}), "header entry \"a\\x01b\" is a JSON number");
  }
}

TEST_CASE("checkpoint: tensors against the data section", "[checkpoint]") {
  SECTION("offsets past the end: a truncated file") {
    require_error(
        torch_file(torch_entries(), 814000),
        "tensor fc2.weight: data_offsets [803880, 814120] run past the end of the data (814000 bytes)");
  }
  SECTION("overlapping tensors") {
    auto entries = torch_entries();
    entries[2].offsets = "[803800,803840]";
    entries.push_back({"pad", "U8", "[40]", "[803840,803880]"});
    require_error(torch_file(entries), "tensors fc1.weight and fc2.bias overlap (bytes 803800 to 803840");
  }
  SECTION("a gap") {
    auto entries = torch_entries();
    entries[3].offsets = "[803888,814128]";
    require_error(torch_file(entries, 814128), "bytes 803880 to 803888 of the data belong to no tensor");
  }
  SECTION("trailing bytes are refused, as the reference implementation refuses them") {
    require_error(torch_file(torch_entries(), 814121),
                  "1 bytes after the last tensor; safetensors allows none");
  }
  SECTION("non-finite values") {
    std::vector<float> p = pattern(1);
    p[ParamLayout::kFc1Weight + 785] = std::numeric_limits<float>::quiet_NaN();
    Bytes data = torch_data(p);
    require_error(make_file(header_of(torch_entries()), data), "fc1.weight[1, 1] is nan");
    p = pattern(1);
    p[ParamLayout::kFc2Bias + 9] = -std::numeric_limits<float>::infinity();
    require_error(make_file(header_of(torch_entries()), torch_data(p)), "fc2.bias[9] is -inf");
  }
}

TEST_CASE("checkpoint: mnist-dp's metadata", "[checkpoint]") {
  auto with_meta = [](const std::string& meta) { return torch_file(torch_entries(), 814120, meta); };
  require_error(with_meta(R"({"mnist_dp.format_version":"2"})"),
                "checkpoint format_version is \"2\"; this build of mnist-dp reads version 1");
  require_error(with_meta(R"({"mnist_dp.format_version":"1","mnist_dp.epoch":"-1"})"),
                "metadata mnist_dp.epoch is \"-1\", not a non-negative integer");
  require_error(with_meta(R"({"mnist_dp.format_version":"1","mnist_dp.step":"12x"})"),
                "metadata mnist_dp.step is \"12x\", not a non-negative integer");
  require_error(with_meta(R"({"mnist_dp.format_version":"1","mnist_dp.seed":"18446744073709551616"})"),
                "metadata mnist_dp.seed is \"18446744073709551616\", not a non-negative integer");
  require_error(with_meta(R"({"mnist_dp.format_version":"1","mnist_dp.data_fingerprint":"0x12"})"),
                "metadata mnist_dp.data_fingerprint is \"0x12\", not a 64-bit hexadecimal number");
  require_error(with_meta(R"({"mnist_dp.format_version":"1","mnist_dp.momentum":"AAA"})"),
                "metadata mnist_dp.momentum is not valid base64");
  require_error(with_meta(R"({"mnist_dp.format_version":"1","mnist_dp.momentum":"AA=A"})"),
                "metadata mnist_dp.momentum is not valid base64");
  require_error(with_meta(R"({"mnist_dp.format_version":"1","mnist_dp.momentum":"AAAA"})"),
                "metadata mnist_dp.momentum holds 3 bytes; SimpleNet's momentum is 203530 float32 values");

  // Only the keys present are read; the rest default.
  const Checkpoint r =
      parse_checkpoint(with_meta(R"({"mnist_dp.format_version":"1","mnist_dp.epoch":"7"})"), "x");
  REQUIRE(r.has_training_state);
  REQUIRE(r.epoch == 7);
  REQUIRE(r.step == 0);
  REQUIRE(r.extra.empty());
}

TEST_CASE("checkpoint: what cannot be saved", "[checkpoint]") {
  test::TempDir dir;
  Checkpoint c = sample(false);
  c.params.pop_back();
  REQUIRE_THROWS_AS(save_checkpoint(dir / "x", c), std::invalid_argument);
  c = sample(false);
  c.momentum = std::vector<float>(3);
  REQUIRE_THROWS_AS(save_checkpoint(dir / "x", c), std::invalid_argument);
  c = sample(false);
  c.extra["mnist_dp.step"] = "1";
  REQUIRE_THROWS_WITH(save_checkpoint(dir / "x", c), Contains("mnist_dp.step is reserved"));
  c = sample(false);
  c.extra["bad"] = "\xff";
  REQUIRE_THROWS_WITH(save_checkpoint(dir / "x", c), Contains("not valid UTF-8"));
  REQUIRE(std::filesystem::is_empty(dir.path()));
}

// ---- atomic saves ----

std::vector<std::string> names_in(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST_CASE("checkpoint saves replace the previous file whole, or leave it alone", "[checkpoint]") {
  test::TempDir dir;
  const auto path = dir / "model.safetensors";
  save_checkpoint(path, sample(false));

  SECTION("saving over it leaves the new file and no temporary") {
    Checkpoint c = sample(true);
    c.step = 9999;
    save_checkpoint(path, c);
    REQUIRE(load_checkpoint(path).step == 9999);
    REQUIRE(names_in(dir.path()) == std::vector<std::string>{"model.safetensors"});
  }
  SECTION("a diverged run does not replace the last good checkpoint") {
    Checkpoint c = sample(false);
    c.params[ParamLayout::kFc2Weight + 300] = std::numeric_limits<float>::infinity();
    REQUIRE_THROWS_WITH(
        save_checkpoint(path, c),
        StartsWith(path.string() + ": not saved: fc2.weight[1, 44] is inf (the run has diverged"));
    REQUIRE(load_checkpoint(path).step == 2814);
  }
  SECTION("a write that fails half way (file size limit) leaves the old file and no temporary") {
    struct Restore {
      rlimit old{};
      void (*handler)(int);
      Restore() : handler(signal(SIGXFSZ, SIG_IGN)) { getrlimit(RLIMIT_FSIZE, &old); }
      ~Restore() {
        setrlimit(RLIMIT_FSIZE, &old);
        signal(SIGXFSZ, handler);
      }
    } restore;
    rlimit small = restore.old;
    small.rlim_cur = 64 * 1024;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
    Checkpoint c = sample(false);
    c.step = 1;
    REQUIRE_THROWS_WITH(save_checkpoint(path, c), StartsWith(path.string() + ": not saved: writing ") &&
                                                      Contains("the previous checkpoint is unchanged"));
    REQUIRE(load_checkpoint(path).step == 2814);
    REQUIRE(names_in(dir.path()) == std::vector<std::string>{"model.safetensors"});
  }
  SECTION("a folder that does not exist") {
    const auto missing = dir / "no" / "such" / "m.safetensors";
    REQUIRE_THROWS_MATCHES(save_checkpoint(missing, sample(false)), CheckpointError,
                           Catch::Matchers::Message(missing.string() + ": not saved: the folder " +
                                                    (dir / "no" / "such").string() + " does not exist"));
  }
  SECTION("a folder that is a file") {
    REQUIRE_THROWS_WITH(save_checkpoint(path / "m.safetensors", sample(false)),
                        Contains("not saved: " + path.string() + " is not a folder"));
    REQUIRE(load_checkpoint(path).step == 2814);
  }
  SECTION("a target that is a folder") {
    std::filesystem::create_directory(dir / "sub");
    std::ofstream(dir / "sub" / "keep") << "x";
    REQUIRE_THROWS_WITH(save_checkpoint(dir / "sub", sample(false)), Contains("not saved: it is a folder"));
    REQUIRE(names_in(dir.path()) == std::vector<std::string>{"model.safetensors", "sub"});
  }
  SECTION("a folder that is not writable") {
    if (geteuid() == 0) {
      // Permissions do not stop root; a read-only system folder does.
      if (std::filesystem::is_directory("/sys"))
        REQUIRE_THROWS_WITH(
            save_checkpoint("/sys/mnistdp-test.safetensors", sample(false)),
            StartsWith("/sys/mnistdp-test.safetensors: not saved: cannot write in the folder /sys"));
    } else {
      std::filesystem::permissions(dir.path(),
                                   std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
      REQUIRE_THROWS_WITH(
          save_checkpoint(path, sample(true)),
          StartsWith(path.string() + ": not saved: cannot write in the folder " + dir.path().string()));
      std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all);
      REQUIRE(load_checkpoint(path).step == 2814);
    }
  }
}

TEST_CASE("a save removes the temporary files of saves whose process is gone, and only those",
          "[checkpoint]") {
  test::TempDir dir;
  const auto path = dir / "model.safetensors";
  // A pid that surely names no process: a child's, once it has been reaped.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  auto touch = [&](const std::string& name) { std::ofstream(dir / name) << "partial"; };
  const std::string dead = "model.safetensors.tmp-" + std::to_string(child);
  const std::string alive = "model.safetensors.tmp-" + std::to_string(::getppid());  // the test's parent
  touch(dead);
  touch(alive);
  touch("model.safetensors.tmp-notapid");
  touch("other.safetensors.tmp-" + std::to_string(child));  // another checkpoint's: not this save's business
  save_checkpoint(path, sample(false));
  CHECK(names_in(dir.path()) == std::vector<std::string>{"model.safetensors", alive,
                                                         "model.safetensors.tmp-notapid",
                                                         "other.safetensors.tmp-" + std::to_string(child)});
}

TEST_CASE("checkpoint: a writer killed at random moments always leaves a loadable file",
          "[checkpoint][kill]") {
  test::TempDir dir;
  const auto path = dir / "model.safetensors";
  save_checkpoint(path, sample(true));
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> delay_us(0, 20'000);
  int killed_while_running = 0;
  int interrupted = 0;  // kills that landed in the middle of a save
  // At least 30 kills, and on until 3 of them have landed in the middle of a save: how often one does depends
  // on how much of a save is the file's writing, which varies with the machine and the build (under the
  // sanitizers the serialisation before it is slow). A cap keeps a broken writer from looping for ever.
  int round = 0;
  for (; round < 30 || (interrupted < 3 && round < 400); ++round) {
    // The child says when its first save is done, so that no kill lands before it has started saving (on a
    // loaded machine a fork can take longer than the whole random delay).
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // The child saves again and again, each time with a new step, until it is killed.
      close(ready[0]);
      Checkpoint c = sample(round % 2 == 0);
      try {
        for (long step = 1;; ++step) {
          c.step = step;
          save_checkpoint(path, c);
          if (step == 1) {
            const char byte = 1;
            static_cast<void>(write(ready[1], &byte, 1));
            close(ready[1]);
          }
        }
      } catch (...) {
      }
      _exit(1);
    }
    close(ready[1]);
    char byte = 0;
    REQUIRE(read(ready[0], &byte, 1) == 1);
    close(ready[0]);
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    kill(child, SIGKILL);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) ++killed_while_running;
    // The killed writer's temporary file shows that the kill landed in the middle of a save, not between two
    // (counted now: the next writer's first save removes it, its process being gone).
    if (std::filesystem::exists(path.string() + ".tmp-" + std::to_string(child))) ++interrupted;
    INFO("round " << round);
    const Checkpoint r = load_checkpoint(path);
    REQUIRE(same(r.params, pattern(1)));
  }
  REQUIRE(killed_while_running == round);
  INFO(interrupted << " of " << round << " kills interrupted a save");
  REQUIRE(interrupted >= 3);
}

// ---- fuzz ----

// Either a valid checkpoint or a CheckpointError; anything else (another exception, a crash) fails.
void parse_must_not_crash(const Bytes& bytes) {
  try {
    (void)parse_checkpoint(bytes, "fuzz");
  } catch (const CheckpointError&) {
  }
}

TEST_CASE("checkpoint fuzz: truncations fail cleanly", "[checkpoint][fuzz]") {
  for (const bool momentum : {false, true}) {
    const Bytes full = serialize_checkpoint(sample(momentum));
    REQUIRE_NOTHROW(parse_checkpoint(full, "full"));
    const std::size_t header_end = 8 + (full[0] | std::size_t{full[1]} << 8 | std::size_t{full[2]} << 16);
    // Every length through the prefix, the header and 8 KiB beyond (each cut there takes its own path), then
    // every 257th and the last 1024. A cut inside the data always takes the same path (the header parses, the
    // offsets run past the end), and all 814,000 of them take half a minute. With momentum the header is
    // 1.1 MB of JSON, 5 ms a parse (0.2 s under the sanitizers): cuts inside it stop at the length prefix,
    // and those past it are only sampled. Cuts in the dense part are copied into a buffer of their own so
    // that AddressSanitizer sees a read past the cut; the sampled ones are views, or the copying dominates.
    const std::size_t stride = momentum ? 131071 : 257;
    const std::size_t tail = momentum ? 4 : 1024;
    std::size_t tried = 0;
    std::vector<std::size_t> accepted;
    for (std::size_t length = 0; length < full.size(); ++length) {
      const bool dense = length < std::min<std::size_t>(header_end, 8192) + 8192;
      if (!dense && length % stride != 0 && length + tail < full.size()) continue;
      const Bytes owned = dense ? Bytes(full.begin(), full.begin() + static_cast<long>(length)) : Bytes{};
      const std::span<const std::uint8_t> cut = dense ? std::span(owned) : std::span(full).first(length);
      ++tried;
      try {
        (void)parse_checkpoint(cut, "cut");
        accepted.push_back(length);
      } catch (const CheckpointError&) {
      }
    }
    INFO("momentum " << momentum << ", " << tried << " lengths tried");
    REQUIRE(tried > 10000);
    REQUIRE(accepted.empty());
  }
}

TEST_CASE("checkpoint fuzz: random byte flips give a checkpoint or a CheckpointError", "[checkpoint][fuzz]") {
  std::mt19937_64 rng(2024);
  for (const bool momentum : {false, true}) {
    const Bytes original = serialize_checkpoint(sample(momentum));
    const std::size_t header_end =
        8 + (original[0] | std::size_t{original[1]} << 8 | std::size_t{original[2]} << 16);
    // 1.1 MB of JSON with momentum takes 5 ms a parse (0.2 s under the sanitizers): fewer trials there.
    for (int trial = 0; trial < (momentum ? 20 : 300); ++trial) {
      Bytes bytes = original;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) {
        // Most flips land in the prefix and the header (the JSON), where the parsing is.
        const std::size_t limit = rng() % 8 == 0 ? bytes.size() : std::min<std::size_t>(header_end, 2048);
        bytes[rng() % limit] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
      }
      INFO("momentum " << momentum << " trial " << trial);
      REQUIRE_NOTHROW(parse_must_not_crash(bytes));
    }
  }
}

}  // namespace
}  // namespace mnistdp
