#pragma once
// A fresh, empty folder under the system's temporary folder, removed with everything in it when the object
// goes out of scope. Each TempDir gets its own random name, so tests can run in parallel processes (ctest
// -j).
#include <cstdint>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>

#include <fmt/format.h>

namespace mnistdp::test {

class TempDir {
 public:
  TempDir() : path_(create_unique()) {}
  ~TempDir() {
    std::error_code ec;  // a destructor must not throw; a leftover temp folder is harmless
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::filesystem::path& name) const { return path_ / name; }

 private:
  // The prefix avoids "mnist" and "fashion": tests of data-set naming look for those words in paths.
  static std::filesystem::path create_unique() {
    const std::filesystem::path base = std::filesystem::temp_directory_path();
    std::random_device random;
    for (int attempt = 0; attempt < 100; ++attempt) {
      const std::uint64_t id = (std::uint64_t{random()} << 32) ^ random();
      std::filesystem::path path = base / fmt::format("mdp-test-{:016x}", id);
      // create_directory is false when the name is taken: then draw another.
      if (std::filesystem::create_directory(path)) return path;
    }
    throw std::runtime_error("cannot create a temporary folder under " + base.string());
  }

  std::filesystem::path path_;
};

}  // namespace mnistdp::test
