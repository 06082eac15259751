// dlprof/report/hta_diff.hpp: `dlprof-report --diff --hta-compat BASE NEW`, HTA's
// TraceDiff.compare_traces table (analysis/hta_trace_diff.hpp): the rank and iteration each side
// compares, the names whose summed time moved most, then every name as HTA lists it. As terminal
// text, JSON and one HTML page.
//
// JSON (render_hta_diff_json), whose rows are HTA's columns:
//   {"dlprof_version", "diff_version": 1, "hta_compat": true,
//    "base" and "new": {"title", "rank", "iteration"},
//    "notes": [...],
//    "rows": [{"name", "control_counts", "test_counts", "control_total_duration",
//              "test_total_duration", "diff_counts", "diff_duration",
//              "counts_change_categories": "+", "-" or "=", "kind": "added", ...}]}:
//   durations in whole µs, summed over the iteration; rows by name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/hta_trace_diff.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/report/diff.hpp"
#include "dlprof/report/html.hpp"
#include "dlprof/report/json.hpp"

DLPROF_BEGIN_NAMESPACE

/// One side of an HTA-compatible comparison: what it is and which of its rank it compares.
struct HtaDiffSide {
  std::string title;  ///< the trace files or directory, with the window chosen
  std::int64_t rank = 0;
};

struct HtaDiffReport {
  HtaDiffSide base;
  HtaDiffSide next;
  analysis::HtaTraceDiff diff;
  std::vector<std::string> notes;
  std::size_t top_rows = 10;  ///< the largest changes shown first in text and HTML
};

namespace detail {

inline std::string hta_side_heading(std::string_view label, const HtaDiffSide& side, std::int64_t iteration) {
  return fmt::format("{}: {}, rank {}, ProfilerStep#{}", label, side.title, side.rank, iteration);
}

inline std::string signed_count(std::int64_t value) { return value > 0 ? fmt::format("+{}", value) : fmt::format("{}", value); }

inline std::vector<std::string> hta_row_cells(const analysis::HtaDiffRow& row) {
  return {row.name,
          std::string(to_string(row.kind)),
          fmt::format("{}", row.base.counts),
          fmt::format("{}", row.next.counts),
          fmt::format("{}", row.base.total_duration_us),
          fmt::format("{}", row.next.total_duration_us),
          signed_count(row.diff_counts()),
          signed_count(row.diff_duration_us())};
}

inline std::string hta_summary_sentence(const HtaDiffReport& report) {
  std::int64_t base_us = 0, next_us = 0;
  std::size_t counts[analysis::kKeyChangeKindCount] = {};
  for (const analysis::HtaDiffRow& row : report.diff.rows) {
    base_us += row.base.total_duration_us;
    next_us += row.next.total_duration_us;
    ++counts[static_cast<std::size_t>(row.kind)];
  }
  return fmt::format("{} names: {} added, {} deleted, {} increased, {} decreased, {} unchanged in count. Their summed time: {} µs "
                     "in BASE, {} µs in NEW ({} µs).",
                     report.diff.rows.size(), counts[0], counts[1], counts[2], counts[3], counts[4], base_us, next_us,
                     signed_count(next_us - base_us));
}

}  // namespace detail

inline std::string render_hta_diff_text(const HtaDiffReport& report) {
  const analysis::HtaTraceDiff& diff = report.diff;
  std::string out = "dlprof-report --diff --hta-compat: HTA's TraceDiff.compare_traces, one iteration of one rank a side\n";
  out += detail::terminal_text(detail::hta_side_heading("BASE", report.base, diff.base_iteration)) + "\n";
  out += detail::terminal_text(detail::hta_side_heading("NEW ", report.next, diff.next_iteration)) + "\n";
  for (const std::string& note : report.notes) out += detail::wrap("Note: " + detail::terminal_text(note), 120, "  ") + "\n";
  out += "\n" + detail::wrap(detail::hta_summary_sentence(report), 120, "  ") + "\n";
  constexpr std::size_t kNameWidth = 40;
  const auto header = [&] {
    return fmt::format("{:<{}} {:<9} {:>8} {:>8} {:>12} {:>12} {:>8} {:>12}\n", "Name", kNameWidth, "Kind", "Counts", "", "Total µs",
                       "", "Diff", "Diff µs") +
           fmt::format("{:<{}} {:<9} {:>8} {:>8} {:>12} {:>12} {:>8}\n", "", kNameWidth, "", "BASE", "NEW", "BASE", "NEW", "counts");
  };
  const auto line = [&](const analysis::HtaDiffRow& row) {
    const std::vector<std::string> cells = detail::hta_row_cells(row);
    return fmt::format("{:<{}} {:<9} {:>8} {:>8} {:>12} {:>12} {:>8} {:>12}\n", detail::key_cell(cells[0], kNameWidth), kNameWidth, cells[1],
                       cells[2], cells[3], cells[4], cells[5], cells[6], cells[7]);
  };
  const std::vector<const analysis::HtaDiffRow*> largest = diff.largest_changes(report.top_rows);
  if (largest.empty()) {
    out += "\nNo name changed its count or its summed time.\n";
  } else {
    out += "\nThe largest changes of summed time\n" + header();
    for (const analysis::HtaDiffRow* row : largest) out += line(*row);
  }
  out += "\nEvery name, as HTA lists them\n" + header();
  for (const analysis::HtaDiffRow& row : diff.rows) out += line(row);
  return out;
}

inline std::string render_hta_diff_json(const HtaDiffReport& report) {
  const analysis::HtaTraceDiff& diff = report.diff;
  fmt::memory_buffer out;
  detail::JsonTree json(out);
  json.begin_object();
  json.member("dlprof_version", DLPROF_VERSION_STRING);
  json.member_integer("diff_version", 1);
  json.key("hta_compat");
  json.boolean(true);
  const auto side = [&](std::string_view name, const HtaDiffSide& run, std::int64_t iteration) {
    json.key(name);
    json.begin_object();
    json.member("title", run.title);
    json.member_integer("rank", run.rank);
    json.member_integer("iteration", iteration);
    json.end_object();
  };
  side("base", report.base, diff.base_iteration);
  side("new", report.next, diff.next_iteration);
  json.key("notes");
  json.begin_array();
  for (const std::string& note : report.notes) json.string(note);
  json.end_array();
  json.key("rows");
  json.begin_array();
  for (const analysis::HtaDiffRow& row : diff.rows) {
    json.begin_object();
    json.member("name", row.name);
    json.member_integer("control_counts", row.base.counts);
    json.member_integer("test_counts", row.next.counts);
    json.member_integer("control_total_duration", row.base.total_duration_us);
    json.member_integer("test_total_duration", row.next.total_duration_us);
    json.member_integer("diff_counts", row.diff_counts());
    json.member_integer("diff_duration", row.diff_duration_us());
    json.member("counts_change_categories", std::string(1, row.change()));
    json.member("kind", to_string(row.kind));
    json.end_object();
  }
  json.end_array();
  json.end_object();
  out.push_back('\n');
  return fmt::to_string(out);
}

inline std::string render_hta_diff_html(const HtaDiffReport& report) {
  const analysis::HtaTraceDiff& diff = report.diff;
  fmt::memory_buffer out;
  detail::HtmlOut html(out);
  const std::string title = fmt::format("dlprof diff (HTA's TraceDiff): {} against {}", report.next.title, report.base.title);
  html.begin_page(title);
  html.element("p", fmt::format("HTA's TraceDiff.compare_traces: one iteration of one rank a side, by name. dlprof {}.",
                                DLPROF_VERSION_STRING),
               "class=\"meta\"");
  html.raw("<ul class=\"meta\">\n");
  html.element("li", detail::hta_side_heading("BASE", report.base, diff.base_iteration));
  html.element("li", detail::hta_side_heading("NEW", report.next, diff.next_iteration));
  for (const std::string& note : report.notes) html.element("li", "Note: " + note);
  html.raw("</ul>\n");
  const std::vector<std::string> headers{"Name",          "Kind",        "Counts BASE", "Counts NEW", "Total µs BASE",
                                         "Total µs NEW", "Diff counts", "Diff µs"};
  const auto table = [&](const std::vector<const analysis::HtaDiffRow*>& rows) {
    std::vector<std::vector<std::string>> cells;
    std::vector<std::string_view> names;
    for (const analysis::HtaDiffRow* row : rows) {
      cells.push_back(detail::hta_row_cells(*row));
      names.push_back(row->name);
    }
    html.table(headers, cells, 0, names);
  };
  html.raw("<section id=\"largest\">\n");
  html.element("h2", "The largest changes of summed time");
  html.element("p", detail::hta_summary_sentence(report));
  table(diff.largest_changes(report.top_rows));
  html.raw("</section>\n<section id=\"names\">\n");
  html.element("h2", "Every name, as HTA lists them");
  std::vector<const analysis::HtaDiffRow*> every;
  for (const analysis::HtaDiffRow& row : diff.rows) every.push_back(&row);
  table(every);
  html.raw("</section>\n</body>\n</html>\n");
  return fmt::to_string(out);
}

DLPROF_END_NAMESPACE
