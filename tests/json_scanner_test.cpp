// tests/json_scanner_test.cpp: the JsonScanner (import/detail/json_scanner.hpp) against RapidJSON,
// the reader of record: every text the scanner reads, RapidJSON reads too, into the same handler
// calls, views and offsets, leaving the same bytes in place; every text RapidJSON refuses or reads
// otherwise, the scanner gives up on. Each text is placed at all 16 offsets from a 16-byte block,
// as the scanner's aligned loads meet it in a trace.
#include <dlprof/import/detail/json_parser.hpp>
#include <dlprof/import/detail/json_scanner.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

namespace {

namespace scan = dlprof::detail::reader;

/// Every call a handler gets, as text: "key ph @12".
struct ScannerCallLog {
  std::vector<std::string> calls;

  void start_object(std::size_t at) { add("{", at); }
  void end_object(std::size_t at) { add("}", at); }
  void start_array(std::size_t at) { add("[", at); }
  void end_array(std::size_t at) { add("]", at); }
  void key(std::string_view text, std::size_t at) { add("key " + std::string(text), at); }
  void string(std::string_view text, std::size_t at) { add("string " + std::string(text), at); }
  void number(std::string_view text, std::size_t at) { add("number " + std::string(text), at); }
  void boolean(bool value, std::size_t at) { add(value ? "true" : "false", at); }
  void null(std::size_t at) { add("null", at); }

  void add(const std::string& what, std::size_t at) { calls.push_back(what + " @" + std::to_string(at)); }
};

/// A text as the reader holds one: `shift` bytes after the start of a 16-byte block, followed
/// by a NUL and padding to the end of the block after it.
class BlockPlacedText {
 public:
  BlockPlacedText(std::string_view text, std::size_t shift) : storage_(new char[text.size() + shift + 64]()) {
    const auto address = reinterpret_cast<std::uintptr_t>(storage_.get());
    text_ = storage_.get() + ((16 - address % 16) % 16) + shift;
    std::memcpy(text_, text.data(), text.size());
    size_ = text.size();
  }
  char* data() const noexcept { return text_; }
  std::string bytes() const { return std::string(text_, size_); }

 private:
  std::unique_ptr<char[]> storage_;
  char* text_ = nullptr;
  std::size_t size_ = 0;
};

struct ScanOutcome {
  bool read = false;  ///< the value closed (or the object at the stop did)
  std::size_t end = 0;
  std::vector<std::string> calls;
  std::string bytes;  ///< the text as the parse left it
};

ScanOutcome by_rapidjson(std::string_view text, std::size_t shift, std::size_t stop_after = SIZE_MAX) {
  BlockPlacedText placed(text, shift);
  ScannerCallLog log;
  const scan::JsonParseEnd end = scan::run_json_parser<rapidjson::kParseStopWhenDoneFlag>(placed.data(), 0, log, stop_after);
  ScanOutcome outcome;
  outcome.read = stop_after == SIZE_MAX ? end.error == rapidjson::kParseErrorNone : end.error == rapidjson::kParseErrorTermination;
  outcome.end = end.offset;
  outcome.calls = std::move(log.calls);
  outcome.bytes = placed.bytes();
  return outcome;
}

scan::ScanEnd by_scanner(std::string_view text, std::size_t shift, ScanOutcome& outcome, std::size_t stop_after = SIZE_MAX) {
  BlockPlacedText placed(text, shift);
  ScannerCallLog log;
  const scan::ScanResult result = scan::scan_json(placed.data(), 0, log, stop_after);
  outcome.read = result.end != scan::ScanEnd::GaveUp;
  outcome.end = result.offset;
  outcome.calls = std::move(log.calls);
  outcome.bytes = placed.bytes();
  return result.end;
}

/// Where the scanner reads `text`, RapidJSON reads it the same way.
void expect_same_reading(std::string_view text, std::size_t shift, const ScanOutcome& scanned, std::size_t stop_after = SIZE_MAX) {
  const ScanOutcome reference = by_rapidjson(text, shift, stop_after);
  ASSERT_TRUE(reference.read) << "the scanner read what RapidJSON refuses: " << text << " (shift " << shift << ")";
  if (stop_after == SIZE_MAX) {
    EXPECT_EQ(scanned.end, reference.end) << text;
  }
  EXPECT_EQ(scanned.calls, reference.calls) << text << " (shift " << shift << ")";
  EXPECT_EQ(scanned.bytes, reference.bytes) << text << " (shift " << shift << ")";
}

const std::vector<std::string>& texts_both_read() {
  static const std::vector<std::string> texts = {
      R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1102, "tid": 1262, "ts": 1712195495519689.047,)"
      R"( "dur": 63.813, "args": {"External id": 2049, "Input Dims": [[2, 3], [3, 4]], "on": true, "off": false, "none": null}})",
      "[\n  {\n    \"ph\": \"f\", \"id\": 1, \"pid\": 1102, \"tid\": 1262, \"ts\": 1712195495519695.812,\n    \"cat\": \"fwdbwd\", "
      "\"name\": \"fwdbwd\", \"bp\": \"e\"\n  },\n  {\n    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"void at::native::"
      "(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native::(anonymous namespace)::OpaqueType<4u>, "
      "unsigned int, 1, 128, 1>\", \"pid\": 0, \"tid\": 7\n  }\n]",
      R"(["a\"b", "tab\there", "\\u00e9: \u00e9", "\u4e2d\u6587", "\/\b\f\n\r", "\u0000 NUL", "\u007f\u0080\u07FF\u0800\uFFFF"])",
      R"(["a long string with an escape after its first block of sixteen bytes, \"quoted\", and a line\nend"])",
      "[\"h\xc3\xa9llo\", \"\xe6\x97\xa5\xe6\x9c\xac\", \"\x7f\"]",
      R"([0, -0, 1, -1, 0.5, -0.5, 10, 1e5, 1E+5, 1e-5, 2.5e-300, 1e-999999, 123456789012345678901234567890, 4294967296,)"
      R"( -9223372036854775809, 18446744073709551616, 3.14159265358979323846264338327950288, 1e299])",
      " \n\t\r{ \"a\" \n: \t[ 1 , 2 ] \r, \"b\":{ } ,\"c\" :[ ]}",
      "{}",
      "[]",
      "[{}, [], [[]], [{}], {\"\": \"\"}]",
      "\"\"",
      "\"x\"",
      "123",
      "-7.5e-3",
      "true",
      "false",
      "null",
      "[true,false,null]",
      R"({"key with \"quotes\" and \\ backslashes": "value with \/ slash"})",
  };
  return texts;
}

TEST(JsonScannerTest, ReadsWhatRapidJsonReadsIntoTheSameCalls) {
  for (const std::string& text : texts_both_read()) {
    for (std::size_t shift = 0; shift < 16; ++shift) {
      ScanOutcome scanned;
      EXPECT_EQ(by_scanner(text, shift, scanned), scan::ScanEnd::Done) << text << " (shift " << shift << ")";
      expect_same_reading(text, shift, scanned);
    }
  }
}

TEST(JsonScannerTest, GivesUpOnWhatRapidJsonRefuses) {
  const std::vector<std::string> refused = {
      R"({"a" 1})", R"({"a": })", "[1,]", R"({"a":1,})", "[1 2]", "{1: 2}", R"("abc)", "\"a\x01b\"", "[\"a\nb\"]",
      R"("\x")", R"("\u12G4")", R"("\u12")", "tru", "nul", "falsy", "[fals]", "-", "[-]", "[01]", "[1.]", "[1.e5]",
      "[1e]", "[1e+]", "[.5]", "[+1]", "[1}", R"({"a":1])", "{", "[", "", " ", "\n\t", "[1e400]", "[-1e309]",
      "[1" + std::string(310, '0') + "]", "{\"a\":1 \"b\":2}", "[\"\\", "]", "}", ":", ",",
  };
  for (const std::string& text : refused) {
    for (std::size_t shift = 0; shift < 16; ++shift) {
      EXPECT_FALSE(by_rapidjson(text, shift).read) << "RapidJSON reads " << text;
      ScanOutcome scanned;
      EXPECT_EQ(by_scanner(text, shift, scanned), scan::ScanEnd::GaveUp) << text << " (shift " << shift << ")";
    }
  }
}

TEST(JsonScannerTest, GivesUpOnWhatRapidJsonReadsOtherwise) {
  // NaN and the infinities (Python's json writes them), surrogates, which RapidJSON pairs or keeps
  // alone, numbers near its limit for doubles, a control byte its SIMD scan lets through.
  const std::vector<std::string> others = {
      "NaN",       "[NaN]",       "[Infinity]", "[-Infinity]", "[Inf]",  R"(["\uD83D\uDE00"])", R"(["\uDC00"])",
      R"(["\ud83d\ude00 emoji"])", "[1e300]",   "[1.5E+308]",  "[1" + std::string(299, '0') + "]",
      "[\"a string long enough to reach its blocks \x1a\"]",
  };
  for (const std::string& text : others) {
    for (std::size_t shift = 0; shift < 16; ++shift) {
      ScanOutcome scanned;
      EXPECT_EQ(by_scanner(text, shift, scanned), scan::ScanEnd::GaveUp) << text << " (shift " << shift << ")";
    }
  }
  EXPECT_TRUE(by_rapidjson("[Infinity]", 0).read);
  EXPECT_TRUE(by_rapidjson(R"(["\uD83D\uDE00"])", 0).read);
  EXPECT_TRUE(by_rapidjson("[1e300]", 0).read);
}

TEST(JsonScannerTest, StopsAfterTheObjectThatClosesWhereItIsTold) {
  const std::string text = R"([{"a": 1}, {"b": [2, {"c": {}}]}, {"d": "}"}])";
  const std::size_t in_string = text.find("\"}\"") + 1;  // closes nothing
  std::size_t stops = 0;
  for (std::size_t at = 0; at < text.size(); ++at) {
    if (text[at] != '}' || at == in_string) continue;
    ++stops;
    for (std::size_t shift = 0; shift < 16; ++shift) {
      ScanOutcome scanned;
      ASSERT_EQ(by_scanner(text, shift, scanned, at), scan::ScanEnd::Stopped) << "stop at " << at;
      expect_same_reading(text, shift, scanned, at);
      EXPECT_EQ(scanned.calls.back(), "} @" + std::to_string(at));
    }
  }
  EXPECT_EQ(stops, 5u);
}

/// Kineto's events, broken at random: a byte replaced, inserted or removed, a few times over.
TEST(JsonScannerTest, AgreesWithRapidJsonOnEveryMutatedEvent) {
  const std::vector<std::string> seeds = {
      texts_both_read()[0], texts_both_read()[1], texts_both_read()[2],
      R"([{"ph": "C", "name": "Memory", "pid": 0, "ts": -1.5e3, "args": {"Total Allocated": 1024, "bad": NaN}}])",
  };
  const std::string alphabet = "{}[]:,\"\\ \n0123456789.eE+-tfnulrsaXu\x01\x1a\xc3";
  std::mt19937 random(20261125);
  std::size_t read = 0;
  std::size_t trials = 0;
  for (const std::string& seed : seeds) {
    for (int trial = 0; trial < 2500; ++trial, ++trials) {
      std::string text = seed;
      const int mutations = 1 + static_cast<int>(random() % 3);
      for (int m = 0; m < mutations && !text.empty(); ++m) {
        const std::size_t at = random() % text.size();
        const char byte = alphabet[random() % alphabet.size()];
        switch (random() % 3) {
          case 0: text[at] = byte; break;
          case 1: text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), byte); break;
          default: text.erase(at, 1); break;
        }
      }
      const std::size_t shift = random() % 16;
      ScanOutcome scanned;
      if (by_scanner(text, shift, scanned) == scan::ScanEnd::GaveUp) continue;
      ++read;
      expect_same_reading(text, shift, scanned);
      if (::testing::Test::HasFailure()) return;
    }
  }
  // Most single mutations break the JSON; enough of them leave text both read for the comparison
  // to mean something.
  EXPECT_GT(read, trials / 10);
}

}  // namespace
