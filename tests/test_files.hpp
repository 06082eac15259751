// Files for tests: a scratch directory per test, readers for plain and gzip files, a directory's
// file names, the calling thread's OS id, a strict UTF-8 check of what the writers wrote, a hostile name, and Python run on a written file.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#if __has_include(<rapidjson/document.h>)
#  include <rapidjson/document.h>
#  include <rapidjson/error/en.h>
#  define DLPROF_TEST_HAS_RAPIDJSON 1
#else
#  define DLPROF_TEST_HAS_RAPIDJSON 0
#endif

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

/// The names of the files in `dir`, sorted.
inline std::vector<std::string> file_names(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

/// The calling thread's id as the kernel gives it (and the traces' "tid").
inline std::int64_t os_tid() { return static_cast<std::int64_t>(::syscall(SYS_gettid)); }

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

// The bytes of a string literal, NULs included.
template <std::size_t N>
std::string literal_bytes(const char (&text)[N]) {
  return std::string(text, N - 1);
}

// A name holding everything a writer must escape or repair, as a program or a file may give it:
// NUL and other control characters, DEL, quotes, a backslash, bytes that are never UTF-8, a
// sequence cut short, an overlong form, a surrogate, a code point beyond U+10FFFF; and valid
// UTF-8 of two, three and four bytes, which must stay as it is.
inline const std::string kHostileName = literal_bytes(
    "hostile\0nul \x01\x1f\x7f \"quoted\" back\\slash \xff\xfe cut\xe2\x82 \xc0\xaf overlong \xed\xa0\x80 "
    "surrogate \xf4\x90\x80\x80 big ok:\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");

// kHostileName as every writer repairs it: each byte that is not part of valid UTF-8 becomes
// U+FFFD, everything else stays.
inline std::string repaired_hostile_name() {
  const auto fffd = [](int count) {
    std::string text;
    for (int i = 0; i < count; ++i) text += "\xEF\xBF\xBD";
    return text;
  };
  return literal_bytes("hostile\0nul \x01\x1f\x7f \"quoted\" back\\slash ") + fffd(2) + " cut" + fffd(2) + " " +
         fffd(2) + " overlong " + fffd(3) + " surrogate " + fffd(4) + " big ok:\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
}

// Lowercase hex of bytes, as Python's bytes.hex() writes them.
inline std::string hex_of(std::string_view bytes) {
  constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (const char c : bytes) {
    hex.push_back(kHex[static_cast<unsigned char>(c) >> 4]);
    hex.push_back(kHex[static_cast<unsigned char>(c) & 0xFu]);
  }
  return hex;
}

struct PythonResult {
  int status = -1;     // python's exit status
  std::string output;  // its stdout and stderr
};

// Runs `script` with python3, the arguments after it (paths: single-quoted for the shell),
// from a file in `dir`. No result when there is no python3 to run: the caller skips its check.
inline std::optional<PythonResult> run_python(const std::filesystem::path& dir, std::string_view script,
                                              const std::vector<std::string>& arguments) {
  if (std::system("command -v python3 >/dev/null 2>&1") != 0) return std::nullopt;
  const std::filesystem::path script_path = dir / "check.py";
  std::ofstream(script_path, std::ios::binary) << script;
  std::string command = "python3 '" + script_path.string() + "'";
  for (const std::string& argument : arguments) command += " '" + argument + "'";
  command += " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  PythonResult result;
  char chunk[4096];
  std::size_t count = 0;
  while ((count = std::fread(chunk, 1, sizeof(chunk), pipe)) > 0) result.output.append(chunk, count);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// A Python script that loads the JSON file argv[1] with Python's json module, the text decoded
// as strict UTF-8, and prints, one a line as the hex of their UTF-8 bytes, every string (key or
// value) that holds "hostile". It fails (a traceback, a non-zero status) on any invalid JSON or
// UTF-8.
inline constexpr std::string_view kPythonHostileStrings = R"(import json, sys
with open(sys.argv[1], 'rb') as f:
    text = f.read().decode('utf-8')
found = []
def walk(value):
    if isinstance(value, dict):
        for key, item in value.items():
            walk(key)
            walk(item)
    elif isinstance(value, list):
        for item in value:
            walk(item)
    elif isinstance(value, str) and 'hostile' in value:
        found.append(value.encode('utf-8').hex())
walk(json.loads(text))
print('\n'.join(found))
)";

#if DLPROF_TEST_HAS_RAPIDJSON
// What kPythonHostileStrings finds, found by RapidJSON, which refuses invalid UTF-8 as asked
// (kParseValidateEncodingFlag): every string holding "hostile", in document order, or the parse
// error.
inline std::vector<std::string> rapidjson_hostile_strings(const std::string& text, std::string* error) {
  rapidjson::Document document;
  document.Parse<rapidjson::kParseValidateEncodingFlag>(text.data(), text.size());
  if (document.HasParseError()) {
    *error = fmt::format("{} at byte {}", rapidjson::GetParseError_En(document.GetParseError()), document.GetErrorOffset());
    return {};
  }
  std::vector<std::string> found;
  const auto see = [&](const rapidjson::Value& value) {
    const std::string_view string(value.GetString(), value.GetStringLength());
    if (string.find("hostile") != std::string_view::npos) found.emplace_back(string);
  };
  const auto walk = [&](const auto& self, const rapidjson::Value& value) -> void {
    if (value.IsObject()) {
      for (const auto& member : value.GetObject()) {
        see(member.name);
        self(self, member.value);
      }
    } else if (value.IsArray()) {
      for (const auto& item : value.GetArray()) self(self, item);
    } else if (value.IsString()) {
      see(value);
    }
  };
  walk(walk, document);
  return found;
}
#endif

// The strings kPythonHostileStrings printed, as bytes.
inline std::vector<std::string> strings_from_hex_lines(const std::string& output) {
  std::vector<std::string> strings;
  std::size_t begin = 0;
  while (begin < output.size()) {
    std::size_t end = output.find('\n', begin);
    if (end == std::string::npos) end = output.size();
    const std::string line = output.substr(begin, end - begin);
    begin = end + 1;
    if (line.empty()) continue;
    std::string bytes;
    for (std::size_t i = 0; i + 1 < line.size(); i += 2)
      bytes.push_back(static_cast<char>(std::stoi(line.substr(i, 2), nullptr, 16)));
    strings.push_back(bytes);
  }
  return strings;
}

}  // namespace dlprof_test
