// libFuzzer target for the safetensors checkpoint reader (host/checkpoint/checkpoint.hpp).
//
// Each input is parsed twice with parse_checkpoint: as it is, and followed by the 814,120 zero bytes of
// SimpleNet's data section. A valid checkpoint is 800 KB of parameters behind a header of a few hundred
// bytes; the second parse lets an input that is only a header (8-byte length, JSON) reach the end of the
// reader, so a small corpus and small mutations cover the whole of it. Each parse must either return a
// checkpoint that holds SimpleNet's parameters or throw CheckpointError; any other exception, a crash or a
// sanitizer report is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <vector>

#include "host/checkpoint/checkpoint.hpp"
#include "host/model/params.hpp"

namespace {

[[noreturn]] void finding(const char* what, const char* input, const char* message) {
  std::fprintf(stderr, "fuzz_checkpoint: %s on the %s: %s\n", what, input, message);
  std::abort();
}

void expect_checkpoint_or_error(std::span<const std::uint8_t> bytes, const char* input) {
  try {
    const mnistdp::Checkpoint c = mnistdp::parse_checkpoint(bytes, "input");
    if (c.params.size() != mnistdp::ParamLayout::kCount)
      finding("a checkpoint of the wrong size", input, "params");
    if (c.momentum && c.momentum->size() != mnistdp::ParamLayout::kCount)
      finding("a checkpoint of the wrong size", input, "momentum");
    if (c.epoch < 0 || c.step < 0) finding("a negative epoch or step", input, "");
  } catch (const mnistdp::CheckpointError&) {
    // The reader refused the file with its own error: the expected outcome for a malformed one.
  } catch (const std::exception& e) {
    finding("an exception other than CheckpointError", input, e.what());
  } catch (...) {
    finding("an exception of unknown type", input, "");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> input(data, size);
  expect_checkpoint_or_error(input, "input as it is");

  static std::vector<std::uint8_t> padded;
  padded.assign(input.begin(), input.end());
  padded.resize(size + mnistdp::ParamLayout::kCount * sizeof(float), 0);
  expect_checkpoint_or_error(padded, "input followed by a zero data section");
  return 0;
}
