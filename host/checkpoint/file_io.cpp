#include "host/checkpoint/file_io.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "host/checkpoint/messages.hpp"

namespace mnistdp::file_io {

namespace {

std::string errno_text(int error) {
  return std::error_code(error, std::generic_category()).message();
}

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);  // errors that matter are seen through close() below
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Closes now and reports the error: on some file systems a failed write shows up only here.
  int close() {
    const int result = ::close(std::exchange(fd_, -1));
    return result == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

// The temporary file is removed unless it was renamed into place, whatever the failure was.
class TemporaryFile {
 public:
  explicit TemporaryFile(std::filesystem::path path) : path_(std::move(path)) {}
  ~TemporaryFile() {
    if (!committed_) ::unlink(path_.c_str());
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  void committed() { committed_ = true; }

 private:
  std::filesystem::path path_;
  bool committed_ = false;
};

class FileSource final : public safetensors::ByteSource {
 public:
  FileSource(const std::filesystem::path& path, std::string_view name)
      : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)), name_(name) {
    if (!fd_.valid()) {
      const int error = errno;
      if (error == ENOENT) fail(name_, "no such file");
      fail(name_, "cannot open the checkpoint: {}", errno_text(error));
    }
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) fail(name_, "cannot read the checkpoint: {}", errno_text(errno));
    if (S_ISDIR(st.st_mode)) fail(name_, "is a folder, not a checkpoint file");
    if (!S_ISREG(st.st_mode)) fail(name_, "is not a regular file");
    size_ = static_cast<std::uint64_t>(st.st_size);
  }
  std::uint64_t size() const override { return size_; }
  void read(std::uint64_t offset, std::span<std::uint8_t> out) const override {
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t n =
          ::pread(fd_.get(), out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail(name_, "cannot read the checkpoint: {}", errno_text(errno));
      if (n == 0) fail(name_, "the file became shorter while it was read (is something writing it?)");
      done += static_cast<std::size_t>(n);
    }
  }

 private:
  FileDescriptor fd_;
  std::string name_;
  std::uint64_t size_ = 0;
};

void write_all(int fd, std::span<const std::uint8_t> bytes, const std::string& name, const std::string& tmp) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      fail(name, "not saved: writing {} failed: {}; the previous checkpoint is unchanged", tmp,
           errno_text(n < 0 ? errno : EIO));
    done += static_cast<std::size_t>(n);
  }
}

[[noreturn]] void fail_to_create(const std::string& name, const std::filesystem::path& dir,
                                 const std::string& tmp, int error) {
  std::error_code ec;
  const auto status = std::filesystem::status(dir, ec);
  if (error == ENOENT && !std::filesystem::exists(status))
    fail(name, "not saved: the folder {} does not exist", dir.string());
  if (error == ENOTDIR || (std::filesystem::exists(status) && !std::filesystem::is_directory(status)))
    fail(name, "not saved: {} is not a folder", dir.string());
  if (error == EACCES || error == EPERM || error == EROFS)
    fail(name, "not saved: cannot write in the folder {}: {}", dir.string(), errno_text(error));
  fail(name, "not saved: cannot create {}: {}", tmp, errno_text(error));
}

}  // namespace

std::unique_ptr<safetensors::ByteSource> open_for_reading(const std::filesystem::path& path,
                                                          std::string_view name) {
  return std::make_unique<FileSource>(path, name);
}

void write_atomically(const std::filesystem::path& path, std::span<const std::uint8_t> bytes) {
  const std::string name = path.string();
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  // Beside the target, so that the rename stays within one file system and is atomic; the pid keeps two
  // processes saving to one path from writing into the same temporary file.
  const std::string tmp = fmt::format("{}.tmp-{}", name, ::getpid());

  FileDescriptor fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) fail_to_create(name, dir, tmp, errno);
  TemporaryFile guard(tmp);
  write_all(fd.get(), bytes, name, tmp);
  // Without fsync before the rename, a power cut can leave the new name pointing at a file whose data never
  // reached the disk: an empty or partial checkpoint where a good one was.
  if (::fsync(fd.get()) != 0)
    fail(name, "not saved: flushing {} failed: {}; the previous checkpoint is unchanged", tmp,
         errno_text(errno));
  if (const int error = fd.close(); error != 0)
    fail(name, "not saved: closing {} failed: {}; the previous checkpoint is unchanged", tmp,
         errno_text(error));

  if (::rename(tmp.c_str(), name.c_str()) != 0) {
    const int error = errno;
    if (error == EISDIR || std::filesystem::is_directory(path))
      fail(name, "not saved: it is a folder; give a file name such as {}/model.safetensors", name);
    fail(name, "not saved: renaming {} onto it failed: {}; the previous checkpoint is unchanged", tmp,
         errno_text(error));
  }
  guard.committed();

  // The rename itself lives in the folder; until the folder is flushed, a power cut can undo it.
  FileDescriptor dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd.valid() || ::fsync(dir_fd.get()) != 0) {
    const int error = errno;
    // Some file systems cannot flush a folder at all; there is nothing more to do for them.
    if (error != EINVAL && error != ENOTSUP)
      fail(name, "saved, but flushing the folder {} failed: {}; a power cut may lose this checkpoint",
           dir.string(), errno_text(error));
  }
}

void remove_abandoned_temporaries(const std::filesystem::path& path) {
  const std::string prefix = path.filename().string() + ".tmp-";
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  std::vector<std::filesystem::path> abandoned;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (file.size() <= prefix.size() || file.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = file.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == -1 && errno == ESRCH) abandoned.push_back(it->path());
  }
  for (const std::filesystem::path& file : abandoned)
    std::filesystem::remove(file, ec);
}

}  // namespace mnistdp::file_io
