#pragma once
// Checkpoints in the safetensors format, with PyTorch's tensor names, so that
//
//   SimpleNet().load_state_dict(safetensors.torch.load_file(path))        # strict loading works
//
// and the reverse (a file written by safetensors.torch.save_file(model.state_dict(), path)) loads here.
//
// The file, as the safetensors reference implementation writes and reads it:
//
//   8 bytes      N, little-endian uint64: the length of the JSON header
//   N bytes      {"__metadata__":{string: string, ...},
//                 "fc1.weight":{"dtype":"F32","shape":[256,784],"data_offsets":[0,802816]}, ...}
//                padded with spaces so that N is a multiple of 8 (the data then starts 8-byte aligned)
//   the data     the tensors' bytes, little-endian; data_offsets are relative to the start of the data
//
// mnist-dp writes the four tensors in ParamLayout's order, so the data section is the flat parameter buffer.
//
// Training state lives in __metadata__ (safetensors allows only strings there):
//   mnist_dp.format_version    "1"; its presence marks a file written by mnist-dp (has_training_state)
//   mnist_dp.epoch             epochs completed, decimal
//   mnist_dp.step              steps done in all, decimal
//   mnist_dp.seed              the run's seed, decimal (it fixes the initial parameters and every epoch's
//   order,
//                              so it is the whole RNG state of a run)
//   mnist_dp.data_fingerprint  16 hex digits, mnist_io's fingerprint() of the training set
//   mnist_dp.momentum          optional: the SGD momentum buffer, [ParamLayout::kCount] float32 little-endian
//                              in ParamLayout's order, base64 (RFC 4648, with padding)
// Any other string key round-trips through Checkpoint::extra.
//
// Why the momentum is in the metadata and not a tensor: torch's load_state_dict is strict by default and
// fails on any key SimpleNet does not have ("Unexpected key(s) in state_dict"), and a companion file cannot
// be replaced atomically together with the main one. A base64 string (1.1 MB for 0.8 MB of floats) keeps one
// file, one atomic rename and strict loading. Python reads it back with tests/python/mnistdp_checkpoint.py.
//
// What a reader accepts, following the reference implementation where it has a rule:
//   - the four tensors, F32 only, with exactly SimpleNet's shapes; other tensors are checked for sound
//     offsets and sizes, then ignored;
//   - the tensors must cover the data section exactly: no overlap, no gap and no trailing bytes (the
//   reference
//     refuses these too, so a file accepted here is one PyTorch can read);
//   - a key appearing twice in one JSON object is refused (the reference keeps the last one silently);
//   - a parameter or momentum value that is NaN or infinite is refused: such a model is never worth resuming,
//     and refusing it on save too keeps a diverged run from replacing its last good checkpoint.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mnistdp {

// A checkpoint that cannot be read or written. The message starts with the file's path and says the problem.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Checkpoint {
  std::vector<float> params;                   // [ParamLayout::kCount], flat, in ParamLayout's order
  std::optional<std::vector<float>> momentum;  // [ParamLayout::kCount]; none before the first momentum step
  int epoch = 0;                               // epochs completed
  long step = 0;                               // steps done in all
  std::uint64_t seed = 0;
  std::uint64_t data_fingerprint = 0;
  std::map<std::string, std::string> extra;  // other metadata, kept as is (keys and values UTF-8)

  // Set by loading: true when the file carries mnist-dp's metadata (epoch, step, seed...), false for a file
  // written by PyTorch, whose parameters can start a run (--init-from) but not resume one. Saving ignores it.
  bool has_training_state = false;
};

inline constexpr int kCheckpointFormatVersion = 1;

// Writes PATH.tmp-<pid>, fsyncs it, renames it onto PATH and fsyncs the folder: a kill at any moment leaves
// either the previous file or the new one at PATH, never a mixture. On failure the temporary file is removed
// and PATH is untouched. Throws CheckpointError (I/O problems, non-finite values) or std::invalid_argument (a
// Checkpoint with wrong buffer sizes, reserved or non-UTF-8 metadata: the caller's mistake).
void save_checkpoint(const std::filesystem::path& path, const Checkpoint& checkpoint);

// Reads and validates PATH (see above for what is accepted). Throws CheckpointError.
Checkpoint load_checkpoint(const std::filesystem::path& path);

// The exact bytes save_checkpoint writes.
std::vector<std::uint8_t> serialize_checkpoint(const Checkpoint& checkpoint);

// load_checkpoint over bytes in memory (for fuzzing and tests); `name` stands for the path in messages.
Checkpoint parse_checkpoint(std::span<const std::uint8_t> bytes, std::string_view name);

}  // namespace mnistdp
