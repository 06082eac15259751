// dlprof/report/detail/text.hpp: what the report's renderers share: trace text made safe for
// JSON and HTML (valid UTF-8, HTML entities), names shortened to a column, and aligned text tables.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// Length of the valid UTF-8 sequence at the start of `text`, or 0 when it is not one (a stray
/// continuation byte, a truncated sequence, an overlong form, a surrogate, beyond U+10FFFF).
inline std::size_t utf8_sequence_length(std::string_view text) noexcept {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  std::uint32_t code_point = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    code_point = lead & 0x1Fu;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    code_point = lead & 0x0Fu;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    code_point = lead & 0x07u;
  } else {
    return 0;
  }
  if (text.size() < length) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0u) != 0x80u) return 0;
    code_point = (code_point << 6) | (byte(i) & 0x3Fu);
  }
  const bool overlong = (length == 3 && code_point < 0x800) || (length == 4 && code_point < 0x10000);
  const bool surrogate = code_point >= 0xD800 && code_point <= 0xDFFF;
  if (overlong || surrogate || code_point > 0x10FFFF) return 0;
  return length;
}

/// `text` with every byte that is not part of valid UTF-8 replaced by U+FFFD: names read from a
/// trace file are whatever bytes it held, and JSON and HTML must be valid UTF-8.
inline std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const std::size_t length = utf8_sequence_length(text);
    if (length == 0) {
      out += "\xEF\xBF\xBD";
      text.remove_prefix(1);
    } else {
      out.append(text.data(), length);
      text.remove_prefix(length);
    }
  }
  return out;
}

/// `text` as HTML text or attribute value: valid UTF-8, with & < > " ' as entities.
inline std::string html_escape(std::string_view text) {
  std::string out;
  for (const char c : valid_utf8(text)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

/// Characters (code points) in `text`, as a terminal gives each a column.
inline std::size_t text_width(std::string_view text) noexcept {
  return static_cast<std::size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0u) != 0x80u; }));
}

/// Byte offset of the `count`th code point of `text` (its size when there are fewer).
inline std::size_t code_point_offset(std::string_view text, std::size_t count) noexcept {
  std::size_t offset = 0;
  for (std::size_t seen = 0; offset < text.size(); ++offset) {
    if ((static_cast<unsigned char>(text[offset]) & 0xC0u) == 0x80u) continue;
    if (seen++ == count) return offset;
  }
  return text.size();
}

/// `text` cut to `width` characters with "..." in the middle: a kernel's name says what it is at
/// the start and which variant at the end (its template arguments and parameters).
inline std::string shorten(std::string_view text, std::size_t width) {
  const std::size_t length = text_width(text);
  if (length <= width) return std::string(text);
  if (width <= 3) return std::string(text.substr(0, code_point_offset(text, width)));
  const std::size_t head = (width - 3) * 2 / 3;
  const std::size_t tail = width - 3 - head;
  return fmt::format("{}...{}", text.substr(0, code_point_offset(text, head)),
                     text.substr(code_point_offset(text, length - tail)));
}

/// `text` broken into lines of at most `width` characters at spaces (a longer word stays whole),
/// every line after the first starting with `indent`.
inline std::string wrap(std::string_view text, std::size_t width, std::string_view indent) {
  std::string out;
  std::size_t line_width = 0;
  while (!text.empty()) {
    const std::size_t space = text.find(' ');
    const std::string_view word = text.substr(0, space);
    text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
    if (word.empty()) continue;
    const std::size_t word_width = text_width(word);
    if (line_width != 0 && line_width + 1 + word_width > width) {
      out += '\n';
      out += indent;
      line_width = text_width(indent);
    } else if (line_width != 0) {
      out += ' ';
      ++line_width;
    }
    out += word;
    line_width += word_width;
  }
  return out;
}

/// A time unit that shows a table's largest value with a few digits before the point.
struct TimeUnit {
  std::string_view name;
  double ns;

  static TimeUnit for_largest(double largest_ns) noexcept {
    if (largest_ns >= 1e9) return {"s", 1e9};
    if (largest_ns >= 1e6) return {"ms", 1e6};
    return {"us", 1e3};
  }
  std::string format(double value_ns) const { return fmt::format("{:.3f}", value_ns / ns); }
};

enum class Align : std::uint8_t { Left, Right };

struct TextColumn {
  std::string header;
  Align align = Align::Right;
  std::size_t max_width = 0;  ///< longer cells are shortened; 0: no limit
};

/// A terminal table: columns as wide as their widest cell, two spaces apart, a rule under the
/// header and wherever add_rule() put one.
class TextTable {
 public:
  explicit TextTable(std::vector<TextColumn> columns) : columns_(std::move(columns)) {}

  void add_row(std::vector<std::string> cells) {
    cells.resize(columns_.size());
    for (std::size_t i = 0; i < cells.size(); ++i)
      if (columns_[i].max_width != 0) cells[i] = shorten(cells[i], columns_[i].max_width);
    rows_.push_back(std::move(cells));
  }
  /// A rule before the next row (before a total or an average).
  void add_rule() { rules_.push_back(rows_.size()); }

  void render(fmt::memory_buffer& out, std::string_view indent = "  ") const {
    std::vector<std::size_t> widths(columns_.size());
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      widths[i] = text_width(columns_[i].header);
      for (const auto& row : rows_) widths[i] = std::max(widths[i], text_width(row[i]));
    }
    std::size_t total_width = 0;
    for (const std::size_t width : widths) total_width += width;
    total_width += 2 * (widths.empty() ? 0 : widths.size() - 1);
    const auto line = [&](const auto& cell_of) {
      std::string text(indent);
      for (std::size_t i = 0; i < columns_.size(); ++i) {
        const std::string_view cell = cell_of(i);
        const std::string padding(widths[i] - text_width(cell), ' ');
        if (i != 0) text += "  ";
        if (columns_[i].align == Align::Right) text += padding;
        text += cell;
        if (columns_[i].align == Align::Left && i + 1 != columns_.size()) text += padding;
      }
      while (!text.empty() && text.back() == ' ') text.pop_back();
      text += '\n';
      out.append(text.data(), text.data() + text.size());
    };
    const auto rule = [&] { fmt::format_to(std::back_inserter(out), "{}{:-<{}}\n", indent, "", total_width); };
    line([&](std::size_t i) -> std::string_view { return columns_[i].header; });
    rule();
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      if (std::find(rules_.begin(), rules_.end(), r) != rules_.end()) rule();
      line([&](std::size_t i) -> std::string_view { return rows_[r][i]; });
    }
  }

 private:
  std::vector<TextColumn> columns_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<std::size_t> rules_;
};

}  // namespace detail
DLPROF_END_NAMESPACE
