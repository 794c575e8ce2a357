#include "host/command/run_file_checks.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace mnistdp {

namespace {

struct RunFile {
  const char* option;
  const std::optional<std::filesystem::path>& path;
};

std::string why(int error) {
  return std::strerror(error);
}

// Creates and removes PATH.probe-<pid>, where a checkpoint's temporary file or the file itself would go.
void probe_folder(const char* option, const std::filesystem::path& path) {
  const std::filesystem::path folder = path.has_parent_path() ? path.parent_path() : ".";
  struct stat st {};
  if (::stat(folder.c_str(), &st) != 0)
    throw std::runtime_error(
        fmt::format("{} {}: the folder {} {}", option, path.string(), folder.string(),
                    errno == ENOENT ? "does not exist" : "cannot be read: " + why(errno)));
  if (!S_ISDIR(st.st_mode))
    throw std::runtime_error(
        fmt::format("{} {}: {} is not a folder", option, path.string(), folder.string()));
  const std::string probe = fmt::format("{}.probe-{}", path.string(), ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw std::runtime_error(fmt::format("{} {}: cannot write in the folder {} ({})", option, path.string(),
                                         folder.string(), why(errno)));
  ::close(fd);
  ::unlink(probe.c_str());
}

// replaced: the file is replaced by renaming a new one onto it (a checkpoint), rather than written in place.
void check_writable(const char* option, const std::filesystem::path& path, bool replaced) {
  if (path.empty()) throw std::runtime_error(fmt::format("{}: the path is empty", option));
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode))
    throw std::runtime_error(
        fmt::format("{} {}: is a folder; give the path of a file in it", option, path.string()));
  if (exists && replaced && !S_ISREG(st.st_mode))
    throw std::runtime_error(fmt::format("{} {}: is not a regular file, and saving would replace it with one",
                                         option, path.string()));
  if (exists && !replaced) {
    // Written in place (/dev/null will do): opened for writing, without truncating, to see that it can be.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
      throw std::runtime_error(
          fmt::format("{} {}: cannot be written ({})", option, path.string(), why(errno)));
    ::close(fd);
    return;
  }
  probe_folder(option, path);
}

}  // namespace

bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  struct stat sa {};
  struct stat sb {};
  const bool a_exists = ::stat(a.c_str(), &sa) == 0;
  const bool b_exists = ::stat(b.c_str(), &sb) == 0;
  if (a_exists && b_exists) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (a_exists != b_exists) return false;
  std::error_code ea, eb;
  const std::filesystem::path ra = std::filesystem::weakly_canonical(std::filesystem::absolute(a), ea);
  const std::filesystem::path rb = std::filesystem::weakly_canonical(std::filesystem::absolute(b), eb);
  return !ea && !eb && ra == rb;
}

void check_distinct_files(const TrainOptions& o) {
  const std::vector<RunFile> files{{"--resume", o.resume},
                                   {"--init-from", o.init_from},
                                   {"--save", o.save},
                                   {"--metrics", o.metrics},
                                   {"--trace", o.trace}};
  for (std::size_t i = 0; i < files.size(); ++i)
    for (std::size_t j = i + 1; j < files.size(); ++j) {
      const RunFile& a = files[i];
      const RunFile& b = files[j];
      if (!a.path || !b.path || a.path->empty() || b.path->empty()) continue;
      if (std::string_view(a.option) == "--resume" && std::string_view(b.option) == "--save") continue;
      if (!same_file(*a.path, *b.path)) continue;
      throw UsageError(fmt::format(
          "{} {} and {} {} name the same file: the run would overwrite it; give {} another path{}", a.option,
          a.path->string(), b.option, b.path->string(), b.option,
          std::string_view(a.option) == "--init-from" && std::string_view(b.option) == "--save"
              ? " (to continue a saved run in its own file, use --resume FILE --save FILE)"
              : ""));
    }
}

void check_outputs_writable(const TrainOptions& o) {
  if (o.save) check_writable("--save", *o.save, true);
  if (o.metrics) check_writable("--metrics", *o.metrics, false);
  if (o.trace) check_writable("--trace", *o.trace, false);
}

}  // namespace mnistdp
