#pragma once
// The files a training run reads and writes (--resume, --init-from, --save, --metrics, --trace), checked
// before its first step: a path that cannot be written would otherwise be found at the first save, after an
// epoch of work, and an output that is also an input (or another output) would destroy that file while the
// run exits 0.
#include "host/command/cli.hpp"

namespace mnistdp {

// Whether two paths name one file (hard links, symbolic links, "./x" and "x"); a path whose file does not
// exist yet is compared by its resolved spelling.
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b);

// Throws UsageError when two of the paths name one file (compared as files: links and other spellings of a
// path count as the same file), except --resume and --save, which continue a run in its own checkpoint.
void check_distinct_files(const TrainOptions& options);

// Throws std::runtime_error, naming the option, when an output path is empty, a folder, or cannot be written:
// for each, a probe file is created beside it and removed again (or, for a file written in place that exists
// already, the file is opened for writing without changing it).
void check_outputs_writable(const TrainOptions& options);

}  // namespace mnistdp
