// Files for tests: a scratch directory per test, readers for plain and gzip files, and a strict
// UTF-8 check of what the writers wrote.
#pragma once

#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
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

// Strictly valid UTF-8 (no overlong form, surrogate or code point beyond U+10FFFF), checked
// apart from the writers' own code.
inline bool is_valid_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    std::size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
    if (length == 0 || i + length > text.size()) return false;
    std::uint32_t code_point = length == 1 ? lead : lead & (0x7Fu >> length);
    for (std::size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0u) != 0x80u) return false;
      code_point = (code_point << 6) | (next & 0x3Fu);
    }
    static constexpr std::uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code_point < kSmallest[length] || (code_point >= 0xD800 && code_point <= 0xDFFF) || code_point > 0x10FFFF)
      return false;
    i += length;
  }
  return true;
}

}  // namespace dlprof_test
