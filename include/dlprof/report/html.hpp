// dlprof/report/html.hpp: the report as one self-contained HTML page: inline CSS, charts as
// inline SVG drawn here, no request to any server (no fonts, scripts or images from elsewhere), so
// it opens from a file, from a mail or on a machine without network.
//
// The page is a viewer in views (viewer.hpp draws the interactive ones). The Overview opens with
// the key figures (MFU, the median step, GPU busy, what bounds the step) and the top
// recommendation, then the verdict, the recommendations ranked by what they save with their
// evidence, and per rank the steps as stacked bars by TensorBoard's roles, the GPU summary, HTA's
// temporal breakdown and kernel types (a pie), the top kernels (bars and a table), nvprof's rows
// and where the host waits for the GPU. Memory holds the memory over time and by category, the
// peaks, growth and memory per op; Distributed the ranks side by side, their collectives and the
// stragglers; Flame graph and Roofline theirs.
// Every text from a trace goes through html_escape() (dlprof/detail/text.hpp): kernel names hold
// <, > and &, and a name that is not UTF-8 or holds a control character still makes a valid
// page. Each chart is an <svg class="chart"> whose drawn parts have class "mark".
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/analysis.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/report/detail/limits.hpp"
#include "dlprof/report/detail/code_lines_section.hpp"
#include "dlprof/report/detail/cuda_graphs_section.hpp"
#include "dlprof/report/detail/memory_by_op_section.hpp"
#include "dlprof/report/detail/memory_sections.hpp"
#include "dlprof/report/detail/thread_cpu_section.hpp"
#include "dlprof/report/detail/text.hpp"
#include "dlprof/report/make_report.hpp"
#include "dlprof/report/viewer.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// "Tensor Cores", "Matrix cores": a table header from a name in running text.
inline std::string capitalized(std::string_view text) {
  std::string out(text);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

inline constexpr std::array<std::string_view, analysis::kStepRoleCount> kStepRoleColors = {
    "#3b73d9", "#f29b30", "#e8c547", "#d64541", "#8e5cc9", "#4caf50", "#26a69a", "#b0b0b0"};

/// HTA's kernel types in their usual colours; rows of overlapping types take the next free ones.
inline std::string_view kernel_type_color(std::uint8_t types, std::size_t row) {
  using analysis::KernelType;
  if (types == analysis::kernel_type_bit(KernelType::Computation)) return "#3b73d9";
  if (types == analysis::kernel_type_bit(KernelType::Communication)) return "#d64541";
  if (types == analysis::kernel_type_bit(KernelType::Memory)) return "#f29b30";
  constexpr std::array<std::string_view, 5> kOthers = {"#8e5cc9", "#26a69a", "#e8c547", "#795548", "#607d8b"};
  return kOthers[row % kOthers.size()];
}

inline constexpr std::string_view kHtmlStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d1d1f;background:#fff;margin:0 auto;max-width:1120px;padding:12px 24px 40px}
h1{font-size:22px;margin:12px 0 4px}h2{font-size:18px;border-bottom:2px solid #e3e3e8;padding-bottom:4px;margin:32px 0 8px}
h3{font-size:15px;margin:22px 0 6px}p.meta,.muted{color:#6e6e73}
table{border-collapse:collapse;font-size:12.5px;margin:4px 0 12px}
th,td{padding:3px 9px;border-bottom:1px solid #ececf0;text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
th{background:#f5f5f7;font-weight:600}th.label,td.label{text-align:left}
th.name,td.name{text-align:left;white-space:normal;overflow-wrap:anywhere;max-width:560px}
p.alert{border-left:4px solid #d64541;padding:4px 8px;background:#fdecea}
svg.chart{display:block;max-width:100%;height:auto;margin:6px 0 10px}svg.chart text{font:11px system-ui,sans-serif;fill:#333}
svg.chart .axis{stroke:#bbb;stroke-width:1}svg.chart .grid{stroke:#eee;stroke-width:1}
ol.advice li{margin:0 0 12px}ol.advice .evidence{color:#555;font-size:13px;margin:2px 0 0}ol.advice code{color:#888;font-size:12px}
.charts{display:flex;flex-wrap:wrap;gap:8px 32px;align-items:flex-start}
svg.flame-graph g.flame{cursor:pointer}svg.flame-graph g.flame text{font:11px ui-monospace,monospace;fill:#222;pointer-events:none}
)";

/// A flame graph's zoom: a click on a box makes it the graph's whole width, with the boxes above
/// it spread out and those below it (its callers) kept as its base; a click on "all" goes back.
/// Labels are cut to the boxes' widths as the page's writer cuts them (flame_label()).
inline constexpr std::string_view kFlameGraphScript = R"(
(function () {
  function label(box) {
    var rect = box.querySelector('rect'), text = box.querySelector('text');
    var name = box.querySelector('title').textContent.split('\n')[0];
    var fit = Math.floor((parseFloat(rect.getAttribute('width')) - 6) / 6.6);
    var chars = Array.from(name);
    text.textContent = fit < 3 ? '' : chars.length <= fit ? name : chars.slice(0, fit - 2).join('') + '..';
  }
  function zoom(svg, target) {
    var left = parseFloat(target.getAttribute('data-x')), width = parseFloat(target.getAttribute('data-w'));
    var depth = Number(target.getAttribute('data-d'));
    var pad = Number(svg.getAttribute('data-pad')), full = svg.viewBox.baseVal.width - 2 * pad;
    svg.querySelectorAll('g.flame').forEach(function (box) {
      var x = parseFloat(box.getAttribute('data-x')), w = parseFloat(box.getAttribute('data-w'));
      var d = Number(box.getAttribute('data-d')), slack = 1e-9;
      var above = d >= depth && x >= left - slack && x + w <= left + width + slack;
      var below = d < depth && x <= left + slack && x + w >= left + width - slack;
      box.style.display = above || below ? '' : 'none';
      if (!above && !below) return;
      var from = below ? 0 : (x - left) / width, span = below ? 1 : w / width;
      box.querySelector('rect').setAttribute('x', (pad + from * full).toFixed(1));
      box.querySelector('rect').setAttribute('width', Math.max(span * full, 0.5).toFixed(1));
      box.querySelector('text').setAttribute('x', (pad + from * full + 3).toFixed(1));
      label(box);
    });
  }
  document.querySelectorAll('svg.flame-graph').forEach(function (svg) {
    svg.addEventListener('click', function (event) {
      var box = event.target.closest('g.flame');
      if (box) zoom(svg, box);
    });
  });
})();
)";

/// Writes a page piece by piece; text() escapes.
class HtmlOut {
 public:
  explicit HtmlOut(fmt::memory_buffer& out) : out_(out) {}

  void raw(std::string_view html) { out_.append(html.data(), html.data() + html.size()); }
  void text(std::string_view text) { raw(html_escape(text)); }
  template <class... Args>
  void format(fmt::format_string<Args...> format, Args&&... args) {
    fmt::format_to(std::back_inserter(out_), format, std::forward<Args>(args)...);
  }
  /// The page's head (its title, dlprof's style, no favicon request) and its heading.
  void begin_page(std::string_view title) {
    raw("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    raw("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    raw("<link rel=\"icon\" href=\"data:,\">\n");
    element("title", title);
    format("\n<style>{}</style>\n</head>\n<body>\n", kHtmlStyle);
    element("h1", title);
  }
  /// <tag>escaped text</tag>
  void element(std::string_view tag, std::string_view text_content, std::string_view attributes = "") {
    format("<{}{}{}>", tag, attributes.empty() ? "" : " ", attributes);
    text(text_content);
    format("</{}>", tag);
  }

  /// A table of text cells, the first column left-aligned. The cells of `name_column` (if any)
  /// may wrap, and names longer than kNameWidth are shortened with the whole name as a tooltip.
  /// `full_names`, where given, are the name column's whole names, each its cell's tooltip.
  void table(const std::vector<std::string>& headers, const std::vector<std::vector<std::string>>& rows,
             std::size_t name_column = SIZE_MAX, const std::vector<std::string_view>& full_names = {}) {
    constexpr std::size_t kNameWidth = 120;
    const auto cell_class = [&](std::size_t i) {
      return i == name_column ? std::string_view(" class=\"name\"") : i == 0 ? std::string_view(" class=\"label\"") : "";
    };
    raw("<table><thead><tr>");
    for (std::size_t i = 0; i < headers.size(); ++i) {
      format("<th{}>", cell_class(i));
      text(headers[i]);
      raw("</th>");
    }
    raw("</tr></thead><tbody>\n");
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const auto& row = rows[r];
      raw("<tr>");
      for (std::size_t i = 0; i < row.size(); ++i) {
        if (i == name_column && r < full_names.size()) {
          format("<td{} title=\"", cell_class(i));
          text(full_names[r]);
          raw("\">");
          text(shorten(row[i], kNameWidth));
        } else if (i == name_column && text_width(row[i]) > kNameWidth) {
          format("<td{} title=\"", cell_class(i));
          text(row[i]);
          raw("\">");
          text(shorten(row[i], kNameWidth));
        } else {
          format("<td{}>", cell_class(i));
          text(row[i]);
        }
        raw("</td>");
      }
      raw("</tr>\n");
    }
    raw("</tbody></table>\n");
  }

 private:
  fmt::memory_buffer& out_;
};

/// A round step between axis ticks (1, 2 or 5 times a power of ten) giving about `ticks` ticks.
inline double nice_tick(double largest, int ticks) {
  if (!(largest > 0)) return 1;
  const double raw = largest / ticks;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double normalised = raw / magnitude;
  return magnitude * (normalised <= 1 ? 1 : normalised <= 2 ? 2 : normalised <= 5 ? 5 : 10);
}

/// "12.5": a tick label without trailing zeros.
inline std::string tick_label(double value) {
  std::string text = fmt::format("{:.3f}", value);
  while (text.back() == '0') text.pop_back();
  if (text.back() == '.') text.pop_back();
  return text;
}

/// The opening tag of a chart: `width` x `height` user units, scaled down to the page's width.
inline void open_chart(HtmlOut& html, std::string_view id, int width, int height, std::string_view label) {
  html.format(
      "<svg class=\"chart\" id=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "role=\"img\" aria-label=\"",
      id, width, height, width, height);
  html.text(label);
  html.raw("\">\n");
}

/// A coloured rectangle with a tooltip.
inline void mark_rect(HtmlOut& html, double x, double y, double width, double height, std::string_view color,
                      std::string_view tooltip) {
  html.format("<rect class=\"mark\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>", x, y,
              std::max(width, 0.5), std::max(height, 0.5), color);
  html.text(tooltip);
  html.raw("</title></rect>\n");
}

inline void svg_text(HtmlOut& html, double x, double y, std::string_view text, std::string_view anchor = "start") {
  html.format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\">", x, y, anchor);
  html.text(text);
  html.raw("</text>\n");
}

/// A legend of coloured swatches, `per_row` entries a row from (x, y), 18 units a row.
inline void svg_legend(HtmlOut& html, double x, double y, const std::vector<std::pair<std::string, std::string_view>>& entries,
                      std::size_t per_row, double entry_width) {
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const double left = x + static_cast<double>(i % per_row) * entry_width;
    const double top = y + static_cast<double>(i / per_row) * 18;
    html.format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"11\" height=\"11\" fill=\"{}\"/>\n", left, top, entries[i].second);
    svg_text(html, left + 16, top + 10, entries[i].first);
  }
}

/// A left axis from 0 to `top_value` over [plot_top, plot_bottom] with grid lines; returns the
/// value at the top of the axis.
inline double svg_value_axis(HtmlOut& html, double largest, double left, double right, double plot_top, double plot_bottom,
                             std::string_view unit) {
  const double tick = nice_tick(largest, 5);
  const double top_value = std::max(tick, std::ceil(largest / tick) * tick);
  for (double value = 0; value <= top_value + tick / 2; value += tick) {
    const double y = plot_bottom - (plot_bottom - plot_top) * value / top_value;
    html.format("<line class=\"grid\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>\n", left, y, right, y);
    svg_text(html, left - 6, y + 4, tick_label(value), "end");
  }
  html.format("<line class=\"axis\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>\n", left, plot_top, left, plot_bottom);
  html.format("<line class=\"axis\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>\n", left, plot_bottom, right, plot_bottom);
  svg_text(html, left - 6, plot_top - 8, unit, "end");
  return top_value;
}

/// Roles that some of `role_times` has, in priority order.
inline std::vector<std::size_t> roles_present(const std::vector<std::array<double, analysis::kStepRoleCount>>& role_times) {
  std::vector<std::size_t> present;
  for (std::size_t role = 0; role < analysis::kStepRoleCount; ++role)
    if (std::any_of(role_times.begin(), role_times.end(), [&](const auto& times) { return times[role] > 0; }))
      present.push_back(role);
  return present;
}

inline std::vector<std::pair<std::string, std::string_view>> role_legend(const std::vector<std::size_t>& roles) {
  std::vector<std::pair<std::string, std::string_view>> entries;
  for (const std::size_t role : roles)
    entries.emplace_back(std::string(to_string(static_cast<analysis::StepRole>(role))), kStepRoleColors[role]);
  return entries;
}

/// One stacked bar per step, a segment per role.
inline void html_step_chart(HtmlOut& html, const std::string& id, const analysis::StepBreakdown& breakdown) {
  std::vector<std::array<double, analysis::kStepRoleCount>> times;
  double longest = 0;
  for (const analysis::StepTime& step : breakdown.steps) {
    std::array<double, analysis::kStepRoleCount> row{};
    for (std::size_t role = 0; role < analysis::kStepRoleCount; ++role) row[role] = static_cast<double>(step.role_ns[role]);
    times.push_back(row);
    longest = std::max(longest, static_cast<double>(step.duration_ns()));
  }
  const std::vector<std::size_t> roles = roles_present(times);
  const auto unit = TimeUnit::for_largest(longest);
  constexpr int kWidth = 760;
  constexpr double kLeft = 64, kRight = kWidth - 12, kTop = 24, kBottom = 232;
  const int legend_rows = static_cast<int>((roles.size() + 4) / 5);
  open_chart(html, id, kWidth, static_cast<int>(kBottom) + 34 + legend_rows * 18, "Step time breakdown per step");
  const double top_value = svg_value_axis(html, longest / unit.ns, kLeft, kRight, kTop, kBottom, unit.name);
  const double slot = (kRight - kLeft) / static_cast<double>(breakdown.steps.size());
  const double bar = std::min(slot * 0.7, 56.0);
  const std::size_t label_every = (breakdown.steps.size() + 23) / 24;  // at most 24 labels
  for (std::size_t i = 0; i < breakdown.steps.size(); ++i) {
    const analysis::StepTime& step = breakdown.steps[i];
    const double x = kLeft + slot * static_cast<double>(i) + (slot - bar) / 2;
    double stacked = 0;
    for (const std::size_t role : roles) {
      const double value = times[i][role] / unit.ns;
      if (value <= 0) continue;
      const double height = (kBottom - kTop) * value / top_value;
      const double y = kBottom - (kBottom - kTop) * stacked / top_value - height;
      mark_rect(html, x, y, bar, height, kStepRoleColors[role],
                fmt::format("{}: {} {:.3f} {} of {:.3f} {}", step.name, to_string(static_cast<analysis::StepRole>(role)), value,
                            unit.name, static_cast<double>(step.duration_ns()) / unit.ns, unit.name));
      stacked += value;
    }
    if (i % label_every == 0)
      svg_text(html, x + bar / 2, kBottom + 14, step.number >= 0 ? std::to_string(step.number) : std::string(step.name), "middle");
  }
  svg_legend(html, kLeft, kBottom + 30, role_legend(roles), 5, 136);
  html.raw("</svg>\n");
}

/// HTA's kernel types as a pie.
inline void html_kernel_type_pie(HtmlOut& html, const std::string& id, const analysis::KernelTypeBreakdown& types) {
  constexpr int kWidth = 700, kHeight = 230;
  constexpr double kCx = 115, kCy = 115, kRadius = 100;
  open_chart(html, id, kWidth, kHeight, "GPU time by kernel type");
  std::int64_t total = 0;
  for (const analysis::KernelTypeTime& row : types.times) total += row.time_ns;
  constexpr double kPi = 3.14159265358979323846;
  double angle = -kPi / 2;  // from 12 o'clock, clockwise
  std::vector<std::pair<std::string, std::string_view>> legend;
  for (std::size_t i = 0; i < types.times.size(); ++i) {
    const analysis::KernelTypeTime& row = types.times[i];
    const std::string_view color = kernel_type_color(row.types, i);
    const double share = static_cast<double>(row.time_ns) / static_cast<double>(total);
    const std::string tooltip = fmt::format("{}: {:.3f} ms ({:.1f}%)", row.label(), static_cast<double>(row.time_ns) / 1e6, row.percent);
    legend.emplace_back(fmt::format("{} {:.1f}%", row.label(), row.percent), color);
    if (share >= 0.9999) {  // an arc cannot close on itself
      html.format("<circle class=\"mark\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\" fill=\"{}\"><title>", kCx, kCy, kRadius, color);
    } else {
      const double end = angle + 2 * kPi * share;
      html.format(
          "<path class=\"mark\" d=\"M{:.2f},{:.2f} L{:.2f},{:.2f} A{:.1f},{:.1f} 0 {} 1 {:.2f},{:.2f} Z\" fill=\"{}\" "
          "stroke=\"#fff\" stroke-width=\"1\"><title>",
          kCx, kCy, kCx + kRadius * std::cos(angle), kCy + kRadius * std::sin(angle), kRadius, kRadius, share > 0.5 ? 1 : 0,
          kCx + kRadius * std::cos(end), kCy + kRadius * std::sin(end), color);
      angle = end;
    }
    html.text(tooltip);
    html.raw(share >= 0.9999 ? "</title></circle>\n" : "</title></path>\n");
  }
  svg_legend(html, 2 * kCx + 30, 30, legend, 1, 0);
  html.raw("</svg>\n");
}

/// The top kernels as horizontal bars, longest first.
inline void html_top_kernels_chart(HtmlOut& html, const std::string& id, const std::vector<KernelTotal>& kernels) {
  constexpr int kWidth = 900;
  constexpr double kLabel = 390, kBarEnd = 800, kRow = 20;
  const int height = static_cast<int>(kRow * static_cast<double>(kernels.size())) + 10;
  open_chart(html, id, kWidth, height, "Top kernels by GPU time");
  const double longest = static_cast<double>(kernels.front().total_ns);
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const KernelTotal& kernel = kernels[i];
    const double y = 5 + kRow * static_cast<double>(i);
    svg_text(html, kLabel - 8, y + 13, kernel.short_name, "end");
    const double width = longest > 0 ? (kBarEnd - kLabel) * static_cast<double>(kernel.total_ns) / longest : 0;
    mark_rect(html, kLabel, y + 2, width, kRow - 5, kernel_type_color(analysis::kernel_type_bit(kernel.type), 0),
              fmt::format("{}: {} in {} calls ({:.1f}% of kernel time)", kernel.name, KeyAverages::format_duration(kernel.total_ns),
                          kernel.calls, kernel.percent));
    svg_text(html, kLabel + width + 6, y + 13, KeyAverages::format_duration(kernel.total_ns));
  }
  html.raw("</svg>\n");
}

/// Memory allocated over time, a line per device.
inline void html_memory_chart(HtmlOut& html, const std::string& id, const std::vector<MemoryCurve>& curves,
                              std::int64_t origin_ns) {
  constexpr int kWidth = 760;
  constexpr double kLeft = 70, kRight = kWidth - 16, kTop = 24, kBottom = 210;
  constexpr std::array<std::string_view, 6> kColors = {"#3b73d9", "#d64541", "#4caf50", "#f29b30", "#8e5cc9", "#26a69a"};
  std::int64_t first = INT64_MAX, last = INT64_MIN, peak = 0;
  for (const MemoryCurve& curve : curves) {
    first = std::min(first, curve.points.front().first);
    last = std::max(last, curve.points.back().first);
    peak = std::max(peak, curve.peak_bytes);
  }
  const std::string_view unit_name = peak >= (std::int64_t{1} << 30) ? "GiB" : peak >= (std::int64_t{1} << 20) ? "MiB" : "KiB";
  const double unit_bytes = peak >= (std::int64_t{1} << 30) ? 1073741824.0 : peak >= (std::int64_t{1} << 20) ? 1048576.0 : 1024.0;
  const auto time_unit = TimeUnit::for_largest(static_cast<double>(last - origin_ns));
  const int legend_rows = static_cast<int>((curves.size() + 2) / 3);
  open_chart(html, id, kWidth, static_cast<int>(kBottom) + 36 + legend_rows * 18, "Memory allocated over time");
  const double top_value = svg_value_axis(html, static_cast<double>(peak) / unit_bytes, kLeft, kRight, kTop, kBottom, unit_name);
  const double span = std::max<double>(static_cast<double>(last - first), 1.0);
  const auto x_of = [&](std::int64_t time) { return kLeft + (kRight - kLeft) * static_cast<double>(time - first) / span; };
  const auto y_of = [&](std::int64_t bytes) {
    return kBottom - (kBottom - kTop) * static_cast<double>(bytes) / unit_bytes / top_value;
  };
  svg_text(html, kLeft, kBottom + 14, fmt::format("{:.3f} {}", static_cast<double>(first - origin_ns) / time_unit.ns, time_unit.name),
           "start");
  svg_text(html, kRight, kBottom + 14, fmt::format("{:.3f} {}", static_cast<double>(last - origin_ns) / time_unit.ns, time_unit.name),
           "end");
  std::vector<std::pair<std::string, std::string_view>> legend;
  for (std::size_t i = 0; i < curves.size(); ++i) {
    const MemoryCurve& curve = curves[i];
    const std::string_view color = kColors[i % kColors.size()];
    // Allocated memory holds its value until the next event: a step line.
    std::string path = fmt::format("M{:.1f},{:.1f}", x_of(curve.points.front().first), y_of(curve.points.front().second));
    for (std::size_t p = 1; p < curve.points.size(); ++p)
      path += fmt::format(" H{:.1f} V{:.1f}", x_of(curve.points[p].first), y_of(curve.points[p].second));
    path += fmt::format(" H{:.1f}", kRight);
    const std::string label = fmt::format("{} peak {}{}", device_label(curve.device_type, curve.device),
                                          KeyAverages::format_bytes(curve.peak_bytes),
                                          curve.capacity_bytes > 0 ? fmt::format(" of {}", KeyAverages::format_bytes(curve.capacity_bytes))
                                                                   : std::string());
    html.format("<path class=\"mark\" d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"><title>", path, color);
    html.text(label);
    html.raw("</title></path>\n");
    legend.emplace_back(label, color);
  }
  svg_legend(html, kLeft, kBottom + 30, legend, 3, 226);
  html.raw("</svg>\n");
}

/// "cuda0" for "CUDA:0": a label as a part of an element's id, lower case, letters and digits.
inline std::string chart_id_of(std::string_view label) {
  std::string id;
  for (const char c : label)
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) id.push_back(static_cast<char>(c | 0x20));
  return id;
}

inline constexpr std::array<std::string_view, analysis::kMemoryCategoryCount> kMemoryCategoryColors = {
    "#3b73d9", "#8e5cc9", "#f29b30", "#4caf50", "#b0bec5", "#26a69a", "#e0e0e0"};

/// One device's allocated memory over time, stacked by category, with what its allocator reserved
/// as a dashed line.
inline void html_memory_category_chart(HtmlOut& html, const std::string& id, const analysis::DeviceMemoryTimeline& timeline,
                                       std::int64_t origin_ns) {
  if (timeline.points.empty()) return;
  constexpr int kWidth = 760;
  constexpr double kLeft = 70, kRight = kWidth - 16, kTop = 24, kBottom = 210;
  std::int64_t largest = 1;
  std::array<bool, analysis::kMemoryCategoryCount> present{};
  for (const analysis::MemoryTimelinePoint& point : timeline.points) {
    largest = std::max({largest, point.allocated(), point.reserved});
    for (std::size_t c = 0; c < present.size(); ++c) present[c] = present[c] || point.by_category[c] > 0;
  }
  const std::string_view unit_name = largest >= (std::int64_t{1} << 30) ? "GiB" : largest >= (std::int64_t{1} << 20) ? "MiB" : "KiB";
  const double unit_bytes = largest >= (std::int64_t{1} << 30) ? 1073741824.0 : largest >= (std::int64_t{1} << 20) ? 1048576.0 : 1024.0;
  const std::int64_t first = timeline.points.front().time_ns, last = timeline.points.back().time_ns;
  const auto time_unit = TimeUnit::for_largest(static_cast<double>(last - origin_ns));
  const std::string device = device_label(timeline.device_type, timeline.device);
  open_chart(html, id, kWidth, static_cast<int>(kBottom) + 36 + 2 * 18, fmt::format("Memory allocated on {} by category", device));
  const double top_value = svg_value_axis(html, static_cast<double>(largest) / unit_bytes, kLeft, kRight, kTop, kBottom, unit_name);
  const double span = std::max<double>(static_cast<double>(last - first), 1.0);
  const auto x_of = [&](std::int64_t time) { return kLeft + (kRight - kLeft) * static_cast<double>(time - first) / span; };
  const auto y_of = [&](std::int64_t bytes) { return kBottom - (kBottom - kTop) * static_cast<double>(bytes) / unit_bytes / top_value; };
  svg_text(html, kLeft, kBottom + 14, fmt::format("{:.3f} {}", static_cast<double>(first - origin_ns) / time_unit.ns, time_unit.name));
  svg_text(html, kRight, kBottom + 14, fmt::format("{:.3f} {}", static_cast<double>(last - origin_ns) / time_unit.ns, time_unit.name),
           "end");
  // Each category's band is the area under the sum of it and those below it, drawn from the top
  // band down, so that each covers the one before.
  std::vector<std::pair<std::string, std::string_view>> legend;
  for (std::size_t top = present.size(); top-- > 0;) {
    if (!present[top]) continue;
    const auto stacked = [&](const analysis::MemoryTimelinePoint& point) {
      std::int64_t sum = 0;
      for (std::size_t c = 0; c <= top; ++c) sum += point.by_category[c];
      return sum;
    };
    std::string path = fmt::format("M{:.1f},{:.1f} V{:.1f}", x_of(first), y_of(0), y_of(stacked(timeline.points.front())));
    std::int64_t peak = 0;
    for (const analysis::MemoryTimelinePoint& point : timeline.points) {
      path += fmt::format(" H{:.1f} V{:.1f}", x_of(point.time_ns), y_of(stacked(point)));
      peak = std::max(peak, point.by_category[top]);
    }
    path += fmt::format(" H{:.1f} V{:.1f} Z", kRight, y_of(0));
    const std::string label = fmt::format("{} (at most {})", to_string(static_cast<analysis::MemoryCategory>(top)),
                                          KeyAverages::format_bytes(peak));
    html.format("<path class=\"mark\" d=\"{}\" fill=\"{}\" stroke=\"none\"><title>", path, kMemoryCategoryColors[top]);
    html.text(label);
    html.raw("</title></path>\n");
    legend.emplace(legend.begin(), label, kMemoryCategoryColors[top]);
  }
  if (timeline.has_reserved) {
    std::string path = fmt::format("M{:.1f},{:.1f}", x_of(first), y_of(timeline.points.front().reserved));
    for (const analysis::MemoryTimelinePoint& point : timeline.points)
      path += fmt::format(" H{:.1f} V{:.1f}", x_of(point.time_ns), y_of(point.reserved));
    html.format("<path class=\"mark\" d=\"{} H{:.1f}\" fill=\"none\" stroke=\"#333\" stroke-dasharray=\"4 3\"><title>", path, kRight);
    html.text("reserved by the allocator");
    html.raw("</title></path>\n");
    legend.emplace_back("reserved (dashed)", "#333");
  }
  svg_legend(html, kLeft, kBottom + 30, legend, 3, 226);
  html.raw("</svg>\n");
}

/// Each rank's average step, stacked by role: a straggling rank has the longest bar.
inline void html_rank_chart(HtmlOut& html, const std::vector<RankReport>& ranks) {
  std::vector<std::array<double, analysis::kStepRoleCount>> times;
  double longest = 0;
  for (const RankReport& rank : ranks) {
    times.push_back(rank.steps.average_ns());
    longest = std::max(longest, rank.steps.average_step_ns());
  }
  const std::vector<std::size_t> roles = roles_present(times);
  const auto unit = TimeUnit::for_largest(longest);
  constexpr int kWidth = 760;
  constexpr double kLabel = 80, kBarEnd = 660, kRow = 22, kTop = 8;
  const double bars_bottom = kTop + kRow * static_cast<double>(ranks.size());
  const int legend_rows = static_cast<int>((roles.size() + 4) / 5);
  open_chart(html, "ranks-average-step", kWidth, static_cast<int>(bars_bottom) + 16 + legend_rows * 18,
             "Average step time per rank");
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const double y = kTop + kRow * static_cast<double>(i);
    svg_text(html, kLabel - 8, y + 14, fmt::format("rank {}", ranks[i].rank), "end");
    double x = kLabel;
    for (const std::size_t role : roles) {
      const double width = longest > 0 ? (kBarEnd - kLabel) * times[i][role] / longest : 0;
      if (width <= 0) continue;
      mark_rect(html, x, y + 3, width, kRow - 6, kStepRoleColors[role],
                fmt::format("rank {}: {} {:.3f} {} of an average step of {:.3f} {}", ranks[i].rank,
                            to_string(static_cast<analysis::StepRole>(role)), times[i][role] / unit.ns, unit.name,
                            ranks[i].steps.average_step_ns() / unit.ns, unit.name));
      x += width;
    }
    svg_text(html, x + 6, y + 14, fmt::format("{:.3f} {}", ranks[i].steps.average_step_ns() / unit.ns, unit.name));
  }
  svg_legend(html, kLabel, bars_bottom + 8, role_legend(roles), 5, 136);
  html.raw("</svg>\n");
}

inline std::string ms(std::int64_t ns) { return fmt::format("{:.3f}", static_cast<double>(ns) / 1e6); }
inline std::string ms(double ns) { return fmt::format("{:.3f}", ns / 1e6); }

/// A flame graph box's label: its text cut to what `width` units hold, as kFlameGraphScript cuts it.
inline std::string flame_label(std::string_view text, double width) {
  const double fit = std::floor((width - 6) / 6.6);
  if (fit < 3) return {};
  const auto chars = static_cast<std::size_t>(fit);
  if (text_width(text) <= chars) return std::string(text);
  return std::string(text.substr(0, code_point_offset(text, chars - 2))) + "..";
}

/// A flame graph as flamegraph.pl draws one: the outermost frames at the bottom, one row per
/// frame deeper, a box per frame as wide as its time; the frames of the user's code in warm
/// colours, libraries' paler, ops blue. Each box carries its place as a share of the whole, for
/// the zoom (kFlameGraphScript).
inline void html_flame_graph(HtmlOut& html, const std::string& id, const analysis::FlameGraph& graph) {
  constexpr int kWidth = 1100;
  constexpr double kPad = 4, kRow = 17;
  const std::uint32_t rows = graph.depth + 1;  // and "all" below them
  const int height = static_cast<int>(kPad * 2 + kRow * rows);
  html.format(
      "<svg class=\"chart flame-graph\" id=\"{}\" data-pad=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"Flame graph\">\n",
      id, kPad, kWidth, height, kWidth, height);
  const double full = kWidth - 2 * kPad;
  const double total = static_cast<double>(graph.total);
  const bool time = analysis::is_time(graph.metric);
  const auto box = [&](std::string_view text, double from, double span, std::uint32_t depth, std::string_view color, std::int64_t value) {
    const double x = kPad + from * full, width = std::max(span * full, 0.5);
    const double y = kPad + kRow * static_cast<double>(rows - 1 - depth);
    html.format("<g class=\"flame\" data-x=\"{:.9f}\" data-w=\"{:.9f}\" data-d=\"{}\"><rect class=\"mark\" x=\"{:.1f}\" y=\"{:.1f}\" "
                "width=\"{:.1f}\" height=\"{:.1f}\" rx=\"2\" fill=\"{}\"><title>",
                from, span, depth, x, y, width, kRow - 1, color);
    html.text(text);
    html.format("\n{}, {:.2f}%</title></rect><text x=\"{:.1f}\" y=\"{:.1f}\">",
                time ? fmt::format("{} ms", ms(value)) : KeyAverages::format_bytes(value), 100.0 * static_cast<double>(value) / total,
                x + 3, y + kRow - 5);
    html.text(flame_label(text, width));
    html.raw("</text></g>\n");
  };
  box("all", 0, 1, 0, "#d9d9de", graph.total);
  for (const analysis::FlameFrame& frame : graph.frames) {
    std::string color = "#6baed6";
    if (!frame.op) {
      // A colour of the frame's own, so that one function looks the same wherever it is.
      std::uint32_t hash = 2166136261u;
      for (const char c : frame.text) hash = (hash ^ static_cast<unsigned char>(c)) * 16777619u;
      color = is_library_frame(frame.text) ? fmt::format("hsl({},45%,78%)", 40 + hash % 20)
                                           : fmt::format("hsl({},85%,{}%)", hash % 45, 55 + (hash >> 8) % 12);
    }
    box(frame.text, static_cast<double>(frame.start) / total, static_cast<double>(frame.value) / total, frame.depth + 1, color,
        frame.value);
  }
  html.raw("</svg>\n");
}

inline std::string percent_text(double percent) { return fmt::format("{:.1f}%", percent); }

/// A section the text renderer shows too (TableSection): its title, its lines, its table and its
/// notes.
inline void html_section(HtmlOut& html, const TableSection& section) {
  html.element("h3", section.title);
  for (const std::string& line : section.lines) html.element("p", line);
  if (!section.rows.empty()) html.table(section.headers, section.rows, 0);
  if (section.notes.empty()) return;
  html.raw("<ul class=\"muted\">");
  for (const std::string& note : section.notes) html.element("li", note);
  html.raw("</ul>\n");
}

/// A table of ops with torch's columns, and the memory columns where the rank allocated.
inline void html_ops_table(HtmlOut& html, const RankReport& rank, const std::vector<KeyAverage>& ops, const std::string& title) {
  html.element("h3", title);
  std::vector<std::string> headers = {"Name", "Category", "Calls", "Self CPU", "CPU total"};
  if (rank.gpu_activity) headers.insert(headers.end(), {"Self GPU", "GPU total"});
  for (std::string& header : memory_headers(rank)) headers.push_back(std::move(header));
  std::vector<std::vector<std::string>> rows;
  for (const KeyAverage& op : ops) {
    rows.push_back({op.name, std::string(to_string(op.category)), std::to_string(op.calls),
                    KeyAverages::format_duration(op.self_ns), KeyAverages::format_duration(op.total_ns)});
    if (rank.gpu_activity) rows.back().insert(rows.back().end(), {gpu_time_cell(op.gpu_ns), gpu_time_cell(op.gpu_total_ns)});
    for (std::string& cell : memory_cells(rank, op)) rows.back().push_back(std::move(cell));
  }
  html.table(headers, rows, 0);
}

/// The top ops by self CPU and by self GPU time, the GPU's first when it is busy most of the
/// steps: the Operator view for a reader without scripts.
inline void html_rank_ops(HtmlOut& html, const RankReport& rank) {
  const auto by_time = [&](const std::vector<KeyAverage>& ops, std::string_view by) {
    if (ops.empty() && by == "GPU") return;
    html_ops_table(html, rank, ops, fmt::format("Top ops and ranges by self {} time ({} of {})", by, ops.size(), rank.op_names));
  };
  if (rank.gpu_utilization().value_or(0.0) >= 0.5) {
    by_time(rank.top_ops_by_gpu, "GPU");
    by_time(rank.top_ops, "CPU");
  } else {
    by_time(rank.top_ops, "CPU");
    by_time(rank.top_ops_by_gpu, "GPU");
  }
}

inline void html_rank_memory(HtmlOut& html, const RankReport& rank, const Report& report, const std::string& id) {
  for (const analysis::OutOfMemory& failure : rank.out_of_memory) html.element("p", out_of_memory_line(failure), "class=\"alert\"");
  html.element("h3", "Memory allocated over time");
  if (rank.memory.empty()) {
    html.element("p", "No memory events in this trace (record them with profile_memory).", "class=\"muted\"");
  } else {
    html_memory_chart(html, id + "-memory", rank.memory, report.origin_ns);
    for (const analysis::DeviceMemoryTimeline& timeline : rank.memory_timelines)
      html_memory_category_chart(html, fmt::format("{}-memory-{}", id, chart_id_of(device_label(timeline.device_type, timeline.device))),
                                 timeline, report.origin_ns);
  }
  for (const TableSection& peak : memory_peak_sections(rank)) html_section(html, peak);
  for (const TableSection& growth : memory_growth_sections(rank)) html_section(html, growth);
  if (!rank.top_ops_by_memory.empty()) html_ops_table(html, rank, rank.top_ops_by_memory, top_ops_by_memory_title(rank));
  for (const TableSection& device : memory_by_op_sections(rank, report.options.top_rows)) html_section(html, device);
}

inline void html_rank_flame_graphs(HtmlOut& html, const RankReport& rank, const std::string& id) {
  if (rank.cpu_flame_graph.empty() && rank.gpu_flame_graph.empty() && rank.memory_flame_graph.empty()) {
    html.element("p", "No call stacks in this trace: record them (with_stack) for flame graphs of CPU time, launched GPU time and bytes allocated.",
                 "class=\"muted\"");
    return;
  }
  for (const analysis::FlameGraph* graph : {&rank.cpu_flame_graph, &rank.gpu_flame_graph, &rank.memory_flame_graph}) {
    if (graph->empty()) continue;
    const auto [what, unit, flag] = [&]() -> std::tuple<std::string_view, std::string_view, std::string_view> {
      switch (graph->metric) {
        case analysis::StackMetric::SelfGpuTime: return {"the GPU time each op launched", "time", "gpu"};
        case analysis::StackMetric::SelfBytesAllocated: return {"the bytes each op allocated", "bytes", "memory"};
        case analysis::StackMetric::SelfCpuTime: break;
      }
      return {"self CPU time", "time", "cpu"};
    }();
    html.element("h3", fmt::format("Flame graph: {} by call stack ({} in all)", what,
                                   analysis::is_time(graph->metric) ? KeyAverages::format_duration(graph->total)
                                                                    : KeyAverages::format_bytes(graph->total)));
    std::string note = fmt::format("Each box is a frame, as wide as the {} of the ops above it; the ops end the stacks (blue). Click a "
                                   "box to zoom in, \"all\" to zoom out.",
                                   unit);
    if (graph->frames_left_out != 0)
      note += fmt::format(" {} frame{} too narrow to draw {} left out; dlprof-report --stacks {} writes them all as folded stacks.",
                          graph->frames_left_out, graph->frames_left_out == 1 ? "" : "s", graph->frames_left_out == 1 ? "is" : "are",
                          flag);
    html.element("p", note, "class=\"muted\"");
    html_flame_graph(html, fmt::format("{}-flame-{}", id, flag), *graph);
  }
}

inline void html_rank_overview(HtmlOut& html, const RankReport& rank, const Report& report, const std::string& id) {
  if (!rank.flight_recorder_dump.empty()) html.element("p", "Flight-recorder dump: " + rank.flight_recorder_dump);
  if (rank.slow_step) html.element("p", slow_step_sentence(*rank.slow_step));
  for (const analysis::OutOfMemory& failure : rank.out_of_memory) html.element("p", out_of_memory_line(failure), "class=\"alert\"");
  if (rank.read.skipped_events != 0)
    html.element("p",
                 fmt::format("Read with changes: {} event(s) left out, unusable on their own; the first, at byte {}: {}",
                             rank.read.skipped_events, rank.read.first_skip_offset, rank.read.first_skip_reason),
                 "class=\"muted\"");
  for (const std::string& note : rank.read.notes) html.element("p", "Read with changes: " + note, "class=\"muted\"");

  html.element("h3", "Step time breakdown (TensorBoard's roles by priority)");
  if (rank.steps.steps.empty()) {
    html.element("p", "No step in this trace.", "class=\"muted\"");
  } else {
    html_step_chart(html, id + "-steps", rank.steps);
    std::vector<std::array<double, analysis::kStepRoleCount>> role_times;
    for (const analysis::StepTime& step : rank.steps.steps) {
      role_times.emplace_back();
      for (std::size_t role = 0; role < analysis::kStepRoleCount; ++role) role_times.back()[role] = static_cast<double>(step.role_ns[role]);
    }
    const std::vector<std::size_t> roles = roles_present(role_times);
    std::vector<std::string> headers = {"Step", "Total (ms)"};
    for (const std::size_t role : roles) headers.push_back(fmt::format("{} (ms)", to_string(static_cast<analysis::StepRole>(role))));
    std::vector<std::vector<std::string>> rows;
    for (const analysis::StepTime& step : rank.steps.steps) {
      std::vector<std::string> row = {std::string(step.name), ms(step.duration_ns())};
      for (const std::size_t role : roles) row.push_back(ms(step.role_ns[role]));
      rows.push_back(std::move(row));
    }
    const auto average = rank.steps.average_ns();
    const double average_step = rank.steps.average_step_ns();
    std::vector<std::string> mean = {"Average", ms(average_step)};
    for (const std::size_t role : roles)
      mean.push_back(fmt::format("{} ({})", ms(average[role]), percent_text(average_step > 0 ? 100 * average[role] / average_step : 0)));
    rows.push_back(std::move(mean));
    html.table(headers, rows);
    if (rank.gpu_activity)
      if (const std::string note = communication_shares_note(rank.steps, rank.hta); !note.empty())
        html.element("p", note, "class=\"muted\"");
  }

  if (!rank.gpu_activity) {
    html.element("p", "No GPU activity in this trace.", "class=\"muted\"");
  } else {
    if (!rank.steps.devices.empty()) {
      html.element("h3", "GPU summary over the steps (TensorBoard)");
      std::vector<std::vector<std::string>> rows;
      for (const analysis::DeviceMetrics& device : rank.steps.devices)
        rows.push_back({std::to_string(device.device),
                        device.name.empty() ? std::string("unknown")
                        : device.properties_from_id
                            ? fmt::format("{} (deviceProperties lists no GPU {}: the model of id {})", device.name,
                                          device.device, *device.properties_from_id)
                            : std::string(device.name),
                        percent_text(100 * device.utilization),
                        device.sm_efficiency ? percent_text(100 * *device.sm_efficiency) : "unknown",
                        device.achieved_occupancy_percent ? percent_text(*device.achieved_occupancy_percent) : "unknown",
                        device.tensor_core_percent ? percent_text(*device.tensor_core_percent) : "n/a",
                        ms(device.kernel_ns)});
      html.table({"GPU", "Name", "Utilization", "Est. SM efficiency", "Est. achieved occupancy",
                  fmt::format("{} (dlprof)", capitalized(analysis::to_string(rank.steps.matrix_units))), "Kernel time (ms)"},
                 rows, 1);
    }
    const analysis::TemporalBreakdown& temporal = rank.hta.temporal;
    html.element("h3", "GPU time (HTA temporal breakdown) and kernel types (HTA kernel breakdown)");
    html.raw("<div class=\"charts\"><div>\n");
    html.table({"Kind", "Time (ms)", "Share"}, {{"idle", ms(temporal.idle_ns), percent_text(temporal.idle_percent())},
                                               {"compute", ms(temporal.compute_ns), percent_text(temporal.compute_percent())},
                                               {"non-compute", ms(temporal.non_compute_ns), percent_text(temporal.non_compute_percent())},
                                               {"kernel time", ms(temporal.kernel_time_ns), "100.0%"}});
    html.raw("</div><div>\n");
    if (rank.hta.kernel_types.times.empty()) {
      html.element("p", "No GPU kernels.", "class=\"muted\"");
    } else {
      html_kernel_type_pie(html, id + "-kernel-types", rank.hta.kernel_types);
    }
    html.raw("</div></div>\n");

    html.element("h3", fmt::format("Top kernels by GPU time ({} of {})", rank.top_kernels.size(), rank.kernel_names));
    if (!rank.top_kernels.empty()) {
      html_top_kernels_chart(html, id + "-top-kernels", rank.top_kernels);
      std::vector<std::vector<std::string>> rows;
      std::vector<std::string_view> full_names;
      for (const KernelTotal& kernel : rank.top_kernels) {
        full_names.push_back(kernel.name);
        rows.push_back({kernel.short_name, std::string(analysis::to_string(kernel.type)), std::string(tensor_cores_cell(kernel.tensor_cores)),
                        std::to_string(kernel.calls), KeyAverages::format_duration(kernel.total_ns),
                        KeyAverages::format_duration(static_cast<std::int64_t>(kernel.mean_ns())),
                        KeyAverages::format_duration(kernel.max_ns), percent_text(kernel.percent)});
      }
      html.table({"Kernel", "Type", capitalized(analysis::to_string(rank.steps.matrix_units)), "Calls", "Total", "Avg",
                  "Max", "Share"},
                 rows, 0, full_names);
    }
  }

  if (!rank.idle_threads.empty()) {
    html.element("h3", "Idle threads: Python frames of other threads that only wait (left out of the ops above)");
    std::vector<std::vector<std::string>> rows;
    for (std::size_t i = 0; i < rank.idle_threads.size() && i < report.options.top_rows; ++i) {
      const IdleThreadTime& thread = rank.idle_threads[i];
      rows.push_back({thread.thread_name.empty() ? fmt::format("{}", thread.os_tid) : fmt::format("{} ({})", thread.os_tid, thread.thread_name),
                      KeyAverages::format_duration(thread.wait_ns), std::to_string(thread.waits), std::string(thread.frame)});
    }
    html.table({"Thread", "Waiting", "Waits", "Longest in"}, rows, 3);
  }
  if (!rank.code_lines.empty()) html_section(html, code_lines_section(rank));
  if (!rank.cuda_graphs.empty()) html_section(html, cuda_graphs_section(rank, report.options.top_rows));
  if (!rank.thread_cpu.empty()) {
    html_section(html, thread_cpu_section(rank, report.options.top_rows));
  }

  if (rank.gpu_activity) {
    html.element("h3", "nvprof summary: copies and fills, and API calls (top rows; kernels: the table above)");
    std::vector<std::vector<std::string>> rows;
    const auto add = [&](std::string_view type, const std::vector<analysis::DurationStats>& section, std::int64_t total,
                         bool without_kernels) {
      std::size_t shown = 0;
      for (const analysis::DurationStats& row : section) {
        if (shown == report.options.top_rows) break;
        if (without_kernels && analysis::GpuSummary::is_kernel_row(row)) continue;
        rows.push_back({shown++ == 0 ? std::string(type) : std::string(), percent_text(analysis::GpuSummary::percent(row, total)),
                        KeyAverages::format_duration(row.total_ns), std::to_string(row.calls),
                        KeyAverages::format_duration(static_cast<std::int64_t>(row.mean_ns)),
                        KeyAverages::format_duration(row.min_ns), KeyAverages::format_duration(row.max_ns), std::string(row.name)});
      }
    };
    add("GPU activities", rank.gpu_summary.gpu_activities, rank.gpu_summary.gpu_activities_ns, true);
    add("API calls", rank.gpu_summary.api_calls, rank.gpu_summary.api_calls_ns, false);
    html.table({"Type", "Time(%)", "Time", "Calls", "Avg", "Min", "Max", "Name"}, rows, 7);
  }

  if (rank.gpu_activity && !rank.syncs.empty()) {
    html.element("h3", fmt::format("Where the host waits for the GPU ({} synchronisation point{} in the steps, {} of waiting)",
                                   rank.syncs.points, rank.syncs.points == 1 ? "" : "s",
                                   KeyAverages::format_duration(rank.syncs.wait_ns)));
    html.element("p", "Saves: of the GPU's idle time after each point, what its wait could have covered.", "class=\"muted\"");
    std::vector<std::vector<std::string>> rows;
    for (std::size_t i = 0; i < rank.syncs.sites.size() && i < report.options.top_rows; ++i) {
      const analysis::SyncSite& site = rank.syncs.sites[i];
      rows.push_back({site.kind == analysis::SyncKind::Explicit ? std::string(site.call) : std::string(analysis::to_string(site.kind)),
                      std::to_string(site.count), KeyAverages::format_duration(site.wait_ns),
                      KeyAverages::format_duration(site.gpu_idle_after_ns), KeyAverages::format_duration(site.saving_ns),
                      site.op.empty() ? "-" : std::string(site.op), site.place().empty() ? "-" : std::string(site.place())});
    }
    html.table({"Kind", "Count", "Wait", "Idle after", "Saves", "Op", "Where"}, rows, 6);
  }

  if (rank.dropped_events != 0 || rank.dropped_gpu_records != 0)
    html.element("p", fmt::format("Lost while recording: {} events, {} GPU records (the numbers above miss them).",
                                  rank.dropped_events, rank.dropped_gpu_records),
                 "class=\"muted\"");
  if (rank.overflowed_names != 0)
    html.element("p",
                 fmt::format("{} {} recorded as \"<dlprof: name table full>\": the process's table of run-time names "
                             "reached its limit (ProfilerOptions::name_table_bytes).",
                             rank.overflowed_names, rank.overflowed_names == 1 ? "name was" : "names were"),
                 "class=\"muted\"");
}

/// The parts of a rank's report, each in its view of the page.
enum class RankPart : std::uint8_t { Overview, Operator, Memory, FlameGraph, Roofline };

inline void html_rank(HtmlOut& html, const RankReport& rank, const Report& report, RankPart part) {
  const std::string id = fmt::format("rank-{}", rank.rank);
  constexpr std::array<std::string_view, 5> kPartIds = {"", "-ops", "-memory", "-flame", "-roofline"};
  html.format("<section id=\"{}{}\">\n", id, kPartIds[static_cast<std::size_t>(part)]);
  if (report.ranks.size() > 1 || rank.world_size > 1)
    html.element("h2", rank.world_size > 1 ? fmt::format("Rank {} of {}", rank.rank, rank.world_size) : fmt::format("Rank {}", rank.rank));
  switch (part) {
    case RankPart::Overview: html_rank_overview(html, rank, report, id); break;
    case RankPart::Operator: html_rank_ops(html, rank); break;
    case RankPart::Memory: html_rank_memory(html, rank, report, id); break;
    case RankPart::FlameGraph: html_rank_flame_graphs(html, rank, id); break;
    case RankPart::Roofline:
      if (rank.roofline.rows.empty())
        html.element("p", "No kernel with a known FLOP or byte count on a GPU of known peaks: nothing to set against the roofline.",
                     "class=\"muted\"");
      else
        html_section(html, limits_section(rank, report.options.top_rows));
      break;
  }
  html.raw("</section>\n");
}

inline void html_comparison(HtmlOut& html, const Report& report) {
  const analysis::RankComparison& comparison = *report.comparison;
  html.raw("<section id=\"ranks\">\n");
  html.element("h2", "Ranks compared");
  if (report.slow_rank) html.element("p", slow_rank_sentence(*report.slow_rank));
  html_rank_chart(html, report.ranks);
  std::vector<std::vector<std::string>> rows;
  for (const analysis::RankSummary& rank : comparison.ranks)
    rows.push_back({std::to_string(rank.rank), std::to_string(rank.steps), ms(rank.step_time_mean_ns), ms(rank.step_time_min_ns),
                    ms(rank.step_time_max_ns), percent_text(100 * rank.gpu_utilization), percent_text(rank.temporal.idle_percent()),
                    percent_text(rank.temporal.compute_percent()), percent_text(rank.temporal.non_compute_percent()),
                    rank.overlap.has_communication() ? percent_text(rank.overlap.overlap_percent()) : "-"});
  html.table({"Rank", "Steps", "Step mean (ms)", "Min (ms)", "Max (ms)", "GPU util", "Idle", "Compute", "Non-compute", "Comm overlap"},
             rows);
  if (!comparison.steps.empty()) {
    html.element("h3", "Step times across ranks: the slowest and the fastest rank of each step");
    rows.clear();
    for (const analysis::StepAcrossRanks& step : comparison.steps)
      rows.push_back({std::to_string(step.step), std::to_string(step.ranks), std::to_string(step.slowest_rank), ms(step.slowest_ns),
                      ms(step.median_ns), std::to_string(step.fastest_rank), ms(step.fastest_ns),
                      fmt::format("{:+.1f}%", step.slowest_over_median_percent()),
                      fmt::format("{:+.1f}%", step.slowest_over_fastest_percent())});
    html.table({"Step", "Ranks", "Slowest rank", "Slowest (ms)", "Median (ms)", "Fastest rank", "Fastest (ms)", "vs median", "vs fastest"},
               rows);
  }
  html.raw("</section>\n");
}

/// Each rank's average step side by side, by phase: its data loading, forward, backward and
/// optimizer, its waiting inside collectives for the last rank and its transfer once it has arrived.
inline void html_collective_rank_chart(HtmlOut& html, const analysis::CollectiveAnalysis& collectives) {
  using analysis::StepPhase;
  struct Part {
    std::string label;
    std::string_view color;
  };
  const std::array<Part, 6> parts = {{{"data loading", "#f29b30"}, {"forward", "#3b73d9"}, {"backward", "#8e5cc9"},
                                      {"optimizer", "#26a69a"}, {"waiting for the last rank", "#d64541"},
                                      {"transfer", "#e8a0a0"}}};
  std::vector<std::array<double, 6>> times;
  double longest = 0;
  for (const analysis::RankPhases& rank : collectives.ranks) {
    const auto phase = [&](StepPhase p) { return rank.phase_ns[static_cast<std::size_t>(p)]; };
    times.push_back({phase(StepPhase::DataLoading), phase(StepPhase::Forward), phase(StepPhase::Backward),
                     phase(StepPhase::Optimizer), rank.waiting_ns, rank.transfer_ns});
    double sum = 0;
    for (const double t : times.back()) sum += t;
    longest = std::max(longest, std::max(sum, rank.step_ns));
  }
  const auto unit = TimeUnit::for_largest(longest);
  constexpr int kWidth = 760;
  constexpr double kLabel = 80, kBarEnd = 660, kRow = 22, kTop = 8;
  const double bars_bottom = kTop + kRow * static_cast<double>(collectives.ranks.size());
  open_chart(html, "collectives-ranks", kWidth, static_cast<int>(bars_bottom) + 16 + 2 * 18,
             "Each rank's average step by phase, side by side");
  for (std::size_t i = 0; i < collectives.ranks.size(); ++i) {
    const analysis::RankPhases& rank = collectives.ranks[i];
    const double y = kTop + kRow * static_cast<double>(i);
    svg_text(html, kLabel - 8, y + 14, fmt::format("rank {}", rank.rank), "end");
    double x = kLabel;
    for (std::size_t p = 0; p < parts.size(); ++p) {
      const double width = longest > 0 ? (kBarEnd - kLabel) * times[i][p] / longest : 0;
      if (width <= 0) continue;
      mark_rect(html, x, y + 3, width, kRow - 6, parts[p].color,
                fmt::format("rank {}: {} {:.3f} {} per step", rank.rank, parts[p].label, times[i][p] / unit.ns, unit.name));
      x += width;
    }
    svg_text(html, x + 6, y + 14, fmt::format("{:.3f} {} step", rank.step_ns / unit.ns, unit.name));
  }
  std::vector<std::pair<std::string, std::string_view>> legend;
  for (const Part& part : parts) legend.emplace_back(part.label, part.color);
  svg_legend(html, kLabel, bars_bottom + 8, legend, 3, 200);
  html.raw("</svg>\n");
}

inline void html_collectives(HtmlOut& html, const Report& report) {
  const analysis::CollectiveAnalysis& collectives = *report.collectives;
  html.raw("<section id=\"collectives\">\n");
  html.element("h2", "Collectives across ranks");
  for (const std::string& problem : collectives.problems) html.element("p", "Note: " + problem, "class=\"muted\"");
  if (const std::optional<analysis::Straggler>& s = collectives.straggler)
    html.element("p", "Straggler: " + straggler_sentence(*s));
  else
    html.element("p", "Straggler: " + no_straggler_sentence(collectives), "class=\"muted\"");
  html_collective_rank_chart(html, collectives);
  std::vector<std::vector<std::string>> rows;
  for (const analysis::RankPhases& rank : collectives.ranks) {
    const auto phase = [&](analysis::StepPhase p) { return ms(rank.phase_ns[static_cast<std::size_t>(p)]); };
    rows.push_back({std::to_string(rank.rank), std::to_string(rank.steps), ms(rank.step_ns), ms(rank.compute_ns),
                    ms(rank.communication_ns), ms(rank.waiting_ns), ms(rank.transfer_ns), ms(rank.exposed_communication_ns),
                    phase(analysis::StepPhase::DataLoading), phase(analysis::StepPhase::Forward),
                    phase(analysis::StepPhase::Backward), phase(analysis::StepPhase::Optimizer), std::to_string(rank.last_arrivals)});
  }
  html.table({"Rank", "Steps", "Step (ms)", "Compute", "Communication", "Waiting", "Transfer", "Exposed comm", "Data loading",
              "Forward", "Backward", "Optimizer", "Last at"},
             rows);
  rows.clear();
  for (const analysis::CollectiveTypeStats& type : collectives.types) rows.push_back(collective_type_row(type));
  html.element("h3", "Per collective, per call (latency: from the last rank's arrival to the end; wait: a rank's time in it "
                     "before that; bandwidths as nccl-tests define them)");
  html.table(std::vector<std::string>(std::begin(kCollectiveTypeColumns), std::end(kCollectiveTypeColumns)), rows);
  html.raw("</section>\n");
}

}  // namespace detail

namespace detail {

/// The figures a reader looks at first: the model FLOP utilization, the median step, GPU busy
/// and what bounds the step.
inline void html_key_figures(HtmlOut& html, const Report& report) {
  const analysis::Verdict& verdict = report.verdict;
  const auto card = [&](std::string_view figure, std::string_view what) {
    html.raw("<div class=\"card\">");
    html.element("div", figure, "class=\"figure\"");
    html.element("div", what, "class=\"what\"");
    html.raw("</div>");
  };
  html.raw("<div class=\"cards\">");
  card(verdict.mfu ? fmt::format("{:.1f}%", 100.0 * *verdict.mfu) : std::string("unknown"),
       verdict.mfu ? "model FLOP utilization (MFU)" : "MFU: no FLOPs in the trace (record with with_flops)");
  if (verdict.bound != analysis::Bound::NoSteps) {
    card(short_ms(verdict.median_step_ns), fmt::format("median step, of {}", verdict.steps));
    if (verdict.gpu_busy) card(fmt::format("{:.1f}%", 100.0 * *verdict.gpu_busy), "GPU busy");
    const std::string_view bound = [&] {
      switch (verdict.bound) {
        case analysis::Bound::GpuCompute: return "GPU compute";
        case analysis::Bound::CommunicationWait: return "communication";
        case analysis::Bound::MemoryCopies: return "memory copies";
        case analysis::Bound::Input: return "input";
        case analysis::Bound::Host: return "the host";
        case analysis::Bound::NoSteps: break;
      }
      return "";
    }();
    card(fmt::format("{:.1f}%", verdict.bound_share), fmt::format("of the step bound by {}", bound));
  }
  html.raw("</div>\n");
  if (verdict.top_actions != 0) {
    const analysis::Recommendation& top = report.recommendations.front();
    html.raw("<p class=\"top-action\"><strong>Top recommendation: ");
    html.text(saving_of(top));
    html.raw("</strong> ");
    html.text(top.action);
    html.raw("</p>\n");
  }
}

struct ViewTab {
  std::string_view id;
  std::string_view title;
};

inline constexpr ViewTab kViewTabs[] = {{"overview", "Overview"}, {"operator", "Operator"}, {"kernel", "Kernel"},
                                        {"trace", "Trace"},       {"memory", "Memory"},     {"module", "Module"},
                                        {"distributed", "Distributed"}, {"flame", "Flame graph"}, {"roofline", "Roofline"},
                                        {"diff", "Diff"}};

inline void open_view(HtmlOut& html, std::string_view id, std::string_view title) {
  html.format("<section class=\"view\" id=\"{}\">\n", id);
  html.element("h2", title, "class=\"view-title\"");
}

inline constexpr std::string_view kNeedsScripts =
    "<noscript><p class=\"muted\">This view is drawn by the page's script, which is off.</p></noscript>\n"
    "<div class=\"interactive-view\"></div>\n";

/// A view the page's script draws whole.
inline void scripted_view(HtmlOut& html, std::string_view id, std::string_view title) {
  open_view(html, id, title);
  html.raw(kNeedsScripts);
  html.raw("</section>\n");
}

}  // namespace detail

/// The report as one self-contained HTML page: the views of TensorBoard's profiler plugin as tabs
/// (viewer.hpp), each rank's figures in them.
inline std::string render_html(const Report& report) {
  fmt::memory_buffer out;
  detail::HtmlOut html(out);
  const std::string title = report.options.title.empty() ? "dlprof report" : "dlprof report: " + report.options.title;
  html.begin_page(title);
  html.format("<style>{}</style>\n", detail::kViewerStyle);
  html.element("p",
               fmt::format("{} rank{}; HTA's analyses {}. dlprof {}.", report.ranks.size(), report.ranks.size() == 1 ? "" : "s",
                           report.options.analysis.hta_compat
                               ? "with HTA's conventions (the last ProfilerStep dropped, times rounded inward to whole µs)"
                               : "over every complete step, in exact ns",
                           DLPROF_VERSION_STRING),
               "class=\"meta\"");
  html.raw("<nav class=\"tabs\">");
  for (const detail::ViewTab& tab : detail::kViewTabs) html.format("<a href=\"#{}\">{}</a>", tab.id, tab.title);
  html.raw("</nav>\n");

  detail::open_view(html, "overview", "Overview");
  detail::html_key_figures(html, report);
  const analysis::Verdict& verdict = report.verdict;
  html.raw("<section id=\"verdict\">\n");
  html.element("h2", "Verdict");
  if (verdict.bound == analysis::Bound::NoSteps) {
    html.element("p", "None: the traces hold no step to judge.", "class=\"muted\"");
  } else {
    html.element("p", detail::verdict_bound_sentence(verdict));
    html.element("p", detail::verdict_step_sentence(verdict));
    if (const std::string left_out = detail::left_out_sentence(verdict, report.ranks.size() > 1); !left_out.empty())
      html.element("p", left_out, "class=\"muted\"");
  }
  if (verdict.top_actions == 0) {
    html.element("p", "Top actions: none; no rule found time to save.", "class=\"muted\"");
    if (verdict.bound != analysis::Bound::NoSteps)
      if (const std::string healthy = detail::healthy_report_sentence(report); !healthy.empty()) html.element("p", healthy);
  } else {
    html.raw("<ol class=\"actions\">\n");
    for (std::size_t i = 0; i < verdict.top_actions; ++i) {
      const analysis::Recommendation& finding = report.recommendations[i];
      html.raw("<li>");
      html.element("strong", detail::saving_of(finding));
      html.raw(" ");
      html.text(finding.action);
      html.raw(" ");
      html.element("code", finding.id);
      html.raw("</li>\n");
    }
    html.raw("</ol>\n");
  }
  html.raw("</section>\n");

  html.raw("<section id=\"recommendations\">\n");
  html.element("h2", "Recommendations");
  if (report.recommendations.empty()) {
    html.element("p", "None: no rule found time to save in these traces.", "class=\"muted\"");
  } else {
    html.raw("<ol class=\"advice\">\n");
    for (const analysis::Recommendation& advice : report.recommendations) {
      html.raw("<li>");
      html.element("p", fmt::format("[{}] {}", detail::saving_of(advice), advice.text));
      html.raw("<p class=\"evidence\">");
      html.text(advice.evidence);
      html.raw(" ");
      html.element("code", advice.id);
      html.raw("</p></li>\n");
    }
    html.raw("</ol>\n");
  }
  html.raw("</section>\n");
  for (const RankReport& rank : report.ranks) detail::html_rank(html, rank, report, detail::RankPart::Overview);
  if (report.ranks.empty()) html.element("p", "No trace to report on.", "class=\"muted\"");
  html.format("<details class=\"meta\"><summary>Step times and GPU summary by TensorBoard's rules but for {} deviations</summary><ul>\n",
              std::size(analysis::kTensorBoardDeviations));
  for (const analysis::TensorBoardDeviation& deviation : analysis::kTensorBoardDeviations)
    html.element("li", fmt::format("{}: {}.", deviation.what, deviation.why));
  html.raw("</ul></details>\n");
  html.format("<details class=\"meta\"><summary>HTA's analyses by HTA's definitions but for {} deviations</summary><ul>\n",
              std::size(analysis::kHtaDeviations));
  for (const analysis::HtaDeviation& deviation : analysis::kHtaDeviations)
    html.element("li", fmt::format("{}: {}.", deviation.what, deviation.why));
  html.raw("</ul></details>\n</section>\n");

  detail::open_view(html, "operator", "Operator");
  html.raw(detail::kNeedsScripts);
  html.raw("<noscript>\n");
  for (const RankReport& rank : report.ranks) detail::html_rank(html, rank, report, detail::RankPart::Operator);
  html.raw("</noscript>\n</section>\n");

  detail::scripted_view(html, "kernel", "Kernel");

  detail::scripted_view(html, "trace", "Trace");

  detail::open_view(html, "memory", "Memory");
  for (const RankReport& rank : report.ranks) detail::html_rank(html, rank, report, detail::RankPart::Memory);
  html.raw("</section>\n");

  detail::scripted_view(html, "module", "Module");

  detail::open_view(html, "distributed", "Distributed");
  if (report.comparison) detail::html_comparison(html, report);
  if (report.collectives && !report.collectives->empty()) detail::html_collectives(html, report);
  if (!report.comparison)
    html.element("p", "One rank: a report over the traces of several ranks (a directory of them) compares them here, with their "
                      "collectives and the straggler.", "class=\"muted\"");
  html.raw("</section>\n");

  detail::open_view(html, "flame", "Flame graph");
  for (const RankReport& rank : report.ranks) detail::html_rank(html, rank, report, detail::RankPart::FlameGraph);
  html.raw("</section>\n");

  detail::open_view(html, "roofline", "Roofline");
  for (const RankReport& rank : report.ranks) detail::html_rank(html, rank, report, detail::RankPart::Roofline);
  html.raw("</section>\n");

  detail::open_view(html, "diff", "Diff");
  html.element("p", "Two runs compared step by step: dlprof-report --diff BASE NEW --format html writes that page; this view will hold it "
                    "beside the run's own.", "class=\"muted\"");
  html.raw("</section>\n");

  html.raw("<script type=\"application/json\" id=\"dlprof-views\">");
  detail::write_views_data(out, report);
  html.raw("</script>\n");
  const bool flame_graphs = std::any_of(report.ranks.begin(), report.ranks.end(), [](const RankReport& rank) {
    return !rank.cpu_flame_graph.empty() || !rank.gpu_flame_graph.empty() || !rank.memory_flame_graph.empty();
  });
  if (flame_graphs) html.format("<script>{}</script>\n", detail::kFlameGraphScript);
  html.raw("<script>");
  for (const std::string_view piece : detail::kViewerScript) html.raw(piece);
  html.raw("</script>\n</body>\n</html>\n");
  return fmt::to_string(out);
}

DLPROF_END_NAMESPACE
