// Files for tests: a scratch directory per test and readers for plain and gzip files.
#pragma once

#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <system_error>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace dlprof_test {

/// A unique directory under the test temp dir, named after the running test, removed at the end.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> sequence{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::path(::testing::TempDir()) /
            fmt::format("dlprof_{}_{}_{}_{}", info->test_suite_name(), info->name(), ::getpid(), sequence++);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline std::string read_gzip(const std::filesystem::path& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) throw std::runtime_error("gzopen failed: " + path.string());
  std::string text;
  char chunk[4096];
  int count = 0;
  while ((count = gzread(file, chunk, sizeof(chunk))) > 0) text.append(chunk, static_cast<std::size_t>(count));
  gzclose(file);
  if (count < 0) throw std::runtime_error("gzread failed: " + path.string());
  return text;
}

}  // namespace dlprof_test
