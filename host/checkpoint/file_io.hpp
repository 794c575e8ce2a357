#pragma once
// A checkpoint's file on disk: read piece by piece, and replaced so that a kill or a power cut at any
// moment leaves either the previous file or the new one, never a mixture. Every failure throws
// CheckpointError, its message starting with the file's path; a save's also says what became of the file
// that was there before.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string_view>

#include "host/checkpoint/safetensors.hpp"

namespace mnistdp::file_io {

// PATH's bytes, read as they are asked for. Throws CheckpointError when it does not exist, is not a regular
// file or cannot be read.
std::unique_ptr<safetensors::ByteSource> open_for_reading(const std::filesystem::path& path,
                                                          std::string_view name);

// Writes PATH.tmp-<pid>, fsyncs it, renames it onto PATH and fsyncs the folder. On failure the temporary
// file is removed and PATH is untouched.
void write_atomically(const std::filesystem::path& path, std::span<const std::uint8_t> bytes);

// A save cut short by SIGKILL or a power cut leaves its temporary file, PATH.tmp-PID, behind: never read,
// never in the way (the next save uses its own pid, or truncates), but clutter. After a save, remove those
// whose process no longer exists. Best effort: whatever cannot be read or removed stays, and a file whose pid
// has been reused by another process stays too.
void remove_abandoned_temporaries(const std::filesystem::path& path);

}  // namespace mnistdp::file_io
