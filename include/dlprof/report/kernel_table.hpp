// dlprof/report/kernel_table.hpp: PyProf's kernel table (analysis/kernel_table.hpp) as terminal
// text, CSV, JSON or one HTML page: per rank, each kernel with its layer, op, direction, input
// shapes, precision and units, grid and block, calls, silicon time, FLOPs and bytes, and where it
// stands against the roofline, ranked by the time it lost.
//
//   std::vector<dlprof::RankKernelTable> ranks = {dlprof::rank_kernel_table(std::move(trace))};
//   fmt::print("{}", dlprof::render_kernel_table_text(ranks));
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/kernel_table.hpp"
#include "dlprof/analysis/short_kernel_name.hpp"
#include "dlprof/analysis/tensor_cores.hpp"
#include "dlprof/config.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/report/detail/limits.hpp"
#include "dlprof/report/detail/text.hpp"
#include "dlprof/report/html.hpp"
#include "dlprof/report/json.hpp"
#include "dlprof/report/make_report.hpp"
#include "dlprof/report/text.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE

/// One rank's kernel table and the trace its names point into (kept without its events).
struct RankKernelTable {
  std::int64_t rank = 0;
  analysis::MatrixUnits units = analysis::MatrixUnits::TensorCores;
  analysis::KernelTable table;
  std::shared_ptr<const Trace> trace;
};

/// The kernel table of `trace`, which it keeps; `peaks` as analysis::roofline()'s.
inline RankKernelTable rank_kernel_table(Trace&& trace, const analysis::DevicePeaks* peaks = nullptr) {
  auto kept = std::make_shared<Trace>(std::move(trace));
  RankKernelTable result;
  result.rank = kept->distributed.rank;
  result.units = analysis::matrix_units_of(*kept);
  result.table = analysis::kernel_table(*kept, peaks);
  detail::release_events(*kept);
  result.trace = std::move(kept);
  return result;
}

namespace detail {

inline std::string dims3(const std::array<std::uint32_t, 3>& sizes) {
  return fmt::format("{}x{}x{}", sizes[0], sizes[1], sizes[2]);
}

inline constexpr std::string_view kKernelTableHeaders[] = {
    "Layer", "Op", "Line", "Dir", "Input dims", "Type", "Kernel", "Grid", "Block", "Calls", "Time",
    "FLOPs", "Bytes", "TFLOP/s", "TB/s", "FLOP/B", "Bound", "Of peak", "Time lost"};

/// The table's cells for the terminal and the page: durations and counts as people read them.
inline std::vector<std::string> kernel_table_cells(const analysis::KernelTableRow& row, analysis::MatrixUnits units,
                                                   std::string kernel_name) {
  const auto dash = [](std::string_view text) { return text.empty() ? std::string("-") : std::string(text); };
  const std::optional<double> intensity = row.intensity();
  return {dash(row.layer), dash(row.op), dash(row.line), std::string(analysis::to_string(row.direction)), dash(row.input_dims),
          precision_cell(row, units), std::move(kernel_name), dims3(row.grid), dims3(row.block), std::to_string(row.calls),
          KeyAverages::format_duration(row.kernel_ns), row.flops ? KeyAverages::format_count(*row.flops) : "-",
          row.bytes ? KeyAverages::format_bytes(static_cast<std::int64_t>(*row.bytes)) : "-",
          row.flops ? fmt::format("{:.2f}", row.tflops()) : "-", row.bytes ? fmt::format("{:.3f}", row.tb_per_s()) : "-",
          intensity ? fmt::format("{:.1f}", *intensity) : "-", std::string(analysis::to_string(row.bound)),
          efficiency_cell(row), row.efficiency ? KeyAverages::format_duration(row.time_lost_ns) : "-"};
}

/// The kernel table's column of lines, which only a trace with call stacks fills.
inline constexpr std::size_t kLineColumn = 2;

/// A CSV field (RFC 4180): quoted, its quotes doubled.
inline void csv_field(fmt::memory_buffer& out, std::string_view text) {
  out.push_back('"');
  for (const char c : text) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
}

inline std::string optional_number_text(const std::optional<double>& value, std::string_view format = "{}") {
  return value ? fmt::format(fmt::runtime(format), *value) : std::string();
}

/// "kernels: 12.3 ms, 3 rows" and the devices with no roofs.
inline std::string kernel_table_summary(const RankKernelTable& rank) {
  std::string text = fmt::format("{} row{}, {} of kernels", rank.table.rows.size(), rank.table.rows.size() == 1 ? "" : "s",
                                 KeyAverages::format_duration(rank.table.kernel_ns));
  if (rank.table.unknown_device_ns > 0)
    text += fmt::format("; {} on GPUs whose peaks are not known (give them with dlprof-report --peaks)",
                        KeyAverages::format_duration(rank.table.unknown_device_ns));
  return text;
}

}  // namespace detail

/// The kernel table as terminal tables, one per rank; `row_limit` rows each (0: all), kernels by
/// their short names.
inline std::string render_kernel_table_text(const std::vector<RankKernelTable>& ranks, std::size_t row_limit = 0) {
  fmt::memory_buffer out;
  for (const RankKernelTable& rank : ranks) {
    detail::heading(out, fmt::format("Rank {}: kernels by time lost against the roofline", rank.rank));
    fmt::format_to(std::back_inserter(out), "{}\n\n", detail::kernel_table_summary(rank));
    std::vector<detail::TextColumn> columns;
    for (const std::string_view header : detail::kKernelTableHeaders)
      columns.push_back({std::string(header), detail::Align::Right, 0});
    for (const std::size_t left : {0, 1, 2, 3, 4, 5, 6, 16}) columns[left].align = detail::Align::Left;
    columns[0].max_width = 32;
    columns[1].max_width = 28;
    columns[2].max_width = 48;
    columns[4].max_width = 30;
    columns[6].max_width = KernelTotal::kShortNameWidth;
    const bool lines = rank.table.has_lines();
    if (!lines) columns.erase(columns.begin() + detail::kLineColumn);
    detail::TextTable table(std::move(columns));
    const std::size_t shown = row_limit == 0 ? rank.table.rows.size() : std::min(row_limit, rank.table.rows.size());
    for (std::size_t i = 0; i < shown; ++i) {
      const analysis::KernelTableRow& row = rank.table.rows[i];
      std::vector<std::string> cells = detail::kernel_table_cells(row, rank.units, analysis::short_kernel_name(row.kernel));
      if (!lines) cells.erase(cells.begin() + detail::kLineColumn);
      table.add_row(std::move(cells));
    }
    table.render(out);
    if (shown < rank.table.rows.size())
      fmt::format_to(std::back_inserter(out), "  ... {} more (--top N shows N)\n", rank.table.rows.size() - shown);
  }
  return fmt::to_string(out);
}

/// The kernel table as CSV, one header line and a line per kernel row of every rank: numbers in
/// plain units (µs, counts, %), empty where unknown, names whole.
inline std::string render_kernel_table_csv(const std::vector<RankKernelTable>& ranks) {
  fmt::memory_buffer out;
  fmt::format_to(std::back_inserter(out),
                 "rank,layer,op,line,direction,input_dims,input_types,precision,matrix_units,kernel,grid,block,device,calls,"
                 "kernel_us,flops,bytes,tflops,tb_per_s,intensity,bound,efficiency_pct,mamf_pct,time_lost_us,above_roof,"
                 "cache_resident\n");
  for (const RankKernelTable& rank : ranks)
    for (const analysis::KernelTableRow& row : rank.table.rows) {
      fmt::format_to(std::back_inserter(out), "{},", rank.rank);
      for (const std::string_view text : {row.layer, row.op, row.line, analysis::to_string(row.direction), row.input_dims, row.input_types,
                                          row.precision ? analysis::to_string(*row.precision) : std::string_view()}) {
        detail::csv_field(out, text);
        out.push_back(',');
      }
      fmt::format_to(std::back_inserter(out), "{},", row.matrix_units ? "true" : "false");
      detail::csv_field(out, row.kernel);
      const std::string efficiency = row.efficiency ? fmt::format("{}", 100 * *row.efficiency) : std::string();
      const std::string mamf = row.mamf_share ? fmt::format("{}", 100 * *row.mamf_share) : std::string();
      fmt::format_to(std::back_inserter(out), ",{},{},{},{},{:.3f},{},{},{},{},{},{},{},{},{:.3f},",
                     detail::dims3(row.grid), detail::dims3(row.block), row.device, row.calls,
                     static_cast<double>(row.kernel_ns) / 1e3, row.flops ? std::to_string(*row.flops) : "",
                     row.bytes ? std::to_string(*row.bytes) : "",
                     detail::optional_number_text(row.flops ? std::optional<double>(row.tflops()) : std::nullopt),
                     detail::optional_number_text(row.bytes ? std::optional<double>(row.tb_per_s()) : std::nullopt),
                     detail::optional_number_text(row.intensity()), analysis::to_string(row.bound),
                     efficiency, mamf,
                     static_cast<double>(row.time_lost_ns) / 1e3);
      detail::csv_field(out, row.above_roof);
      fmt::format_to(std::back_inserter(out), ",{}\n", row.cache_resident ? "true" : "false");
    }
  return fmt::to_string(out);
}

/// The kernel table as JSON: {"ranks": [{"rank", "kernel_us", "unknown_device_us", "kernels":
/// [{"kernel", "layer", "op", "line", "direction", "input_dims", "input_types", "grid", "block", and the
/// roofline's members as the report's "limits" ops have them}]}]}.
inline std::string render_kernel_table_json(const std::vector<RankKernelTable>& ranks) {
  fmt::memory_buffer out;
  detail::JsonTree json(out);
  json.begin_object();
  json.member("dlprof_version", DLPROF_VERSION_STRING);
  json.key("ranks");
  json.begin_array();
  for (const RankKernelTable& rank : ranks) {
    json.begin_object();
    json.member_integer("rank", rank.rank);
    json.member_us("kernel_us", rank.table.kernel_ns);
    json.member_us("unknown_device_us", rank.table.unknown_device_ns);
    json.key("kernels");
    json.begin_array();
    for (const analysis::KernelTableRow& row : rank.table.rows) {
      json.begin_object();
      json.member("kernel", row.kernel);
      json.member_text_or_null("layer", row.layer);
      json.member_text_or_null("op", row.op);
      json.member_text_or_null("line", row.line);
      json.member("direction", analysis::to_string(row.direction));
      json.member("input_dims", row.input_dims);
      json.member("input_types", row.input_types);
      json.member("grid", detail::dims3(row.grid));
      json.member("block", detail::dims3(row.block));
      detail::json_roof_measure(json, nullptr, row);
      json.end_object();
    }
    json.end_array();
    json.end_object();
  }
  json.end_array();
  json.end_object();
  out.push_back('\n');
  return fmt::to_string(out);
}

/// The kernel table as one self-contained HTML page.
inline std::string render_kernel_table_html(const std::vector<RankKernelTable>& ranks, std::string_view title = {}) {
  fmt::memory_buffer out;
  detail::HtmlOut html(out);
  const std::string heading = title.empty() ? "dlprof kernel table" : "dlprof kernel table: " + std::string(title);
  html.begin_page(heading);
  for (const RankKernelTable& rank : ranks) {
    html.format("<section id=\"rank-{}\">\n", rank.rank);
    html.element("h2", fmt::format("Rank {}: kernels by time lost against the roofline", rank.rank));
    html.element("p", detail::kernel_table_summary(rank), "class=\"meta\"");
    const bool lines = rank.table.has_lines();
    std::vector<std::string> headers(std::begin(detail::kKernelTableHeaders), std::end(detail::kKernelTableHeaders));
    if (!lines) headers.erase(headers.begin() + detail::kLineColumn);
    std::vector<std::vector<std::string>> rows;
    for (const analysis::KernelTableRow& row : rank.table.rows) {
      rows.push_back(detail::kernel_table_cells(row, rank.units, std::string(row.kernel)));
      if (!lines) rows.back().erase(rows.back().begin() + detail::kLineColumn);
    }
    html.table(headers, rows, lines ? 6 : 5);
    html.raw("</section>\n");
  }
  html.raw("</body>\n</html>\n");
  return fmt::to_string(out);
}

DLPROF_END_NAMESPACE
