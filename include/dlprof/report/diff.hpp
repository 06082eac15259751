// dlprof/report/diff.hpp: two runs compared, as `dlprof-report --diff BASE NEW` prints it: first
// the step time and the few changes that explain it, then the runs' overviews side by side (step
// breakdown, GPU utilization, MFU, memory peak), then every key's change per step with whether it
// is beyond the steps' noise (analysis/run_diff.hpp). As terminal text, JSON and one HTML page.
//
//   dlprof::DiffSide base{"before/", dlprof::make_report(a), step_samples(a, step_breakdown(a), SampleKey::Op)};
//   dlprof::DiffSide next{"after/", dlprof::make_report(b), step_samples(b, step_breakdown(b), SampleKey::Op)};
//   fmt::print("{}", dlprof::render_diff_text(dlprof::make_diff_report(std::move(base), std::move(next))));
//
// JSON (render_diff_json), for scripts:
//   {"dlprof_version", "diff_version": 1, "key": "op" (analysis::to_string(SampleKey)),
//    "base" and "new": {"title", "rank", "steps", "step_numbers": [N...]},
//    "notes": [what differs between the runs besides their figures],
//    "step_time": {"base" and "new": {"mean_us", "median_us", "p25_us", "p75_us"}, "relative",
//                  "relative_lower", "relative_upper", "p_value", "significant"},
//    "explaining": [{"key", "figure", "delta_us", "share"}],
//    "explaining_role": where no key explains it, the step breakdown's role that does, or null,
//    "overview": [{"name", "unit", "base", "new"}] (null where a run has no such figure),
//    "counts": {"added", "deleted", "increased", "decreased", "unchanged", "significant"},
//    "false_discovery_rate",
//    "changes": [{"key", "change", "significant", "p_value", "impact_figure", "impact_us",
//                 "base" and "new": {"calls", "total_us", "self_us", "gpu_self_us", "gpu_total_us",
//                 "self_cpu_memory", "self_device_memory": {"mean", "median", "p25", "p75"}}}]}:
//   times in µs, memory in bytes, calls as counts, all per step.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/run_diff.hpp"
#include "dlprof/analysis/step_samples.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/report/html.hpp"
#include "dlprof/report/json.hpp"
#include "dlprof/report/make_report.hpp"

DLPROF_BEGIN_NAMESPACE

/// One run of a comparison: what it is, its report (one rank) and its samples.
struct DiffSide {
  std::string title;  ///< the trace files or directory; with the rank and window chosen
  Report report;
  analysis::StepSamples samples;
};

/// A figure of the runs' overviews side by side.
struct OverviewFigure {
  std::string name;
  std::string unit;  ///< "ms", "%", "bytes", "count"
  std::optional<double> base;
  std::optional<double> next;
};

struct DiffReport {
  DiffSide base;
  DiffSide next;
  analysis::RunDiff diff;
  std::vector<OverviewFigure> overview;
  std::size_t top_rows = 10;  ///< rows of the changes' table in text and HTML (JSON has them all)
};

namespace detail {

inline std::vector<OverviewFigure> overview_figures(const Report& base, const Report& next) {
  std::vector<OverviewFigure> figures;
  const RankReport* b = base.ranks.empty() ? nullptr : &base.ranks.front();
  const RankReport* n = next.ranks.empty() ? nullptr : &next.ranks.front();
  const auto of = [](const RankReport* rank, auto&& value) -> std::optional<double> {
    if (rank == nullptr || rank->steps.steps.empty()) return std::nullopt;
    return value(*rank);
  };
  figures.push_back({"Step time (mean)", "ms", of(b, [](const RankReport& r) { return r.steps.average_step_ns() / 1e6; }),
                     of(n, [](const RankReport& r) { return r.steps.average_step_ns() / 1e6; })});
  for (std::size_t role = 0; role < analysis::kStepRoleCount; ++role) {
    const auto mean = [role](const RankReport& r) { return r.steps.average_ns()[role] / 1e6; };
    figures.push_back({fmt::format("  {}", to_string(static_cast<analysis::StepRole>(role))), "ms", of(b, mean), of(n, mean)});
  }
  const auto utilization = [](const RankReport* rank) -> std::optional<double> {
    if (rank == nullptr) return std::nullopt;
    const std::optional<double> value = rank->gpu_utilization();
    return value ? std::optional<double>(100 * *value) : std::nullopt;
  };
  if (utilization(b) || utilization(n)) figures.push_back({"GPU utilization", "%", utilization(b), utilization(n)});
  const auto mfu = [](const Report& report) -> std::optional<double> {
    return report.verdict.mfu ? std::optional<double>(100 * *report.verdict.mfu) : std::nullopt;
  };
  if (mfu(base) || mfu(next)) figures.push_back({"MFU", "%", mfu(base), mfu(next)});
  const auto memory_peak = [](const RankReport* rank) -> std::optional<double> {
    if (rank == nullptr || rank->memory.empty()) return std::nullopt;
    std::int64_t peak = 0;
    for (const MemoryCurve& curve : rank->memory) peak = std::max(peak, curve.peak_bytes);
    return static_cast<double>(peak);
  };
  if (memory_peak(b) || memory_peak(n)) figures.push_back({"Memory peak", "bytes", memory_peak(b), memory_peak(n)});
  const auto count = [](const RankReport* rank, std::size_t RankReport::*member) -> std::optional<double> {
    return rank == nullptr ? std::nullopt : std::optional<double>(static_cast<double>(rank->*member));
  };
  figures.push_back({"Op and range names", "count", count(b, &RankReport::op_names), count(n, &RankReport::op_names)});
  if (count(b, &RankReport::kernel_names).value_or(0) + count(n, &RankReport::kernel_names).value_or(0) > 0)
    figures.push_back({"Kernel names", "count", count(b, &RankReport::kernel_names), count(n, &RankReport::kernel_names)});
  return figures;
}

inline std::string overview_value(const std::optional<double>& value, std::string_view unit) {
  if (!value) return "-";
  if (unit == "ms") return fmt::format("{:.3f} ms", *value);
  if (unit == "%") return fmt::format("{:.1f} %", *value);
  if (unit == "bytes") return KeyAverages::format_bytes(static_cast<std::int64_t>(*value));
  return fmt::format("{:.0f}", *value);
}

inline std::string overview_change(const OverviewFigure& figure) {
  if (!figure.base || !figure.next) return "";
  const double delta = *figure.next - *figure.base;
  if (figure.unit == "%") return fmt::format("{:+.1f} points", delta);
  std::string text = figure.unit == "bytes" ? (delta >= 0 ? "+" : "") + KeyAverages::format_bytes(static_cast<std::int64_t>(delta))
                     : figure.unit == "ms"  ? fmt::format("{:+.3f} ms", delta)
                                            : fmt::format("{:+.0f}", delta);
  if (*figure.base != 0) text += fmt::format(" ({:+.1f} %)", 100 * delta / *figure.base);
  return text;
}

/// A per-step time or size in the unit its figure has.
inline std::string per_step_value(double value, analysis::KeyFigure figure) {
  switch (figure) {
    case analysis::KeyFigure::Calls: return fmt::format("{:g}", std::round(value * 100) / 100);
    case analysis::KeyFigure::SelfCpuMemory:
    case analysis::KeyFigure::SelfDeviceMemory: return KeyAverages::format_bytes(static_cast<std::int64_t>(std::llround(value)));
    default: return KeyAverages::format_duration(static_cast<std::int64_t>(std::llround(value)));
  }
}

inline std::string signed_per_step_value(double value, analysis::KeyFigure figure) {
  std::string text = per_step_value(value, figure);
  return value > 0 ? "+" + text : text;
}

inline std::string_view figure_label(analysis::KeyFigure figure) noexcept {
  switch (figure) {
    case analysis::KeyFigure::Calls: return "calls";
    case analysis::KeyFigure::Total: return "CPU total";
    case analysis::KeyFigure::Self: return "self CPU";
    case analysis::KeyFigure::GpuSelf: return "GPU";
    case analysis::KeyFigure::GpuTotal: return "GPU total";
    case analysis::KeyFigure::SelfCpuMemory: return "self CPU memory";
    case analysis::KeyFigure::SelfDeviceMemory: return "self device memory";
  }
  return "";
}

inline std::string p_value_text(double p) {
  if (p >= 0.001) return fmt::format("{:.3f}", p);
  return fmt::format("{:.1e}", p);
}

/// The step times compared, and whether the change is beyond their noise: two parts of a sentence,
/// each shorter than a terminal line.
inline std::pair<std::string, std::string> step_time_sentence(const analysis::StepTimeChange& step) {
  if (step.base_steps == 0 || step.next_steps == 0) return {"Step time: a run has no step to compare.", ""};
  return {fmt::format("Step time: {} -> {} a step (mean; median {} -> {}): {:+.1f} % [{:+.1f} %, {:+.1f} %],",
                      KeyAverages::format_duration(std::llround(step.base.mean)),
                      KeyAverages::format_duration(std::llround(step.next.mean)),
                      KeyAverages::format_duration(std::llround(step.base.median)),
                      KeyAverages::format_duration(std::llround(step.next.median)), 100 * step.relative,
                      100 * step.relative_lower, 100 * step.relative_upper),
          fmt::format("{} the steps' noise (Mann-Whitney p = {})", step.significant ? "beyond" : "within",
                      p_value_text(step.p_value))};
}

inline std::string explaining_line(const analysis::RunDiff& diff, const analysis::KeyChange& change) {
  const double step_delta = diff.step_time.delta_ns();
  std::string line = fmt::format("{} {} {} a step ({})", change.key, figure_label(change.impact_figure),
                                 signed_per_step_value(change.impact_ns, change.impact_figure), to_string(change.kind));
  if (step_delta != 0) line += fmt::format(", {:.0f} % of the change", 100 * change.impact_ns / step_delta);
  return line;
}

/// Where no key explains the step time (work that moved to other threads, or waits that grew), the
/// role of the step breakdown that changed most in its direction: "the step breakdown's DataLoader
/// -925.737 ms a step"; empty where none did.
inline std::string role_explaining(const DiffReport& report) {
  const double step_delta = report.diff.step_time.delta_ns() / 1e6;
  const OverviewFigure* largest = nullptr;
  for (const OverviewFigure& figure : report.overview) {
    if (figure.name.rfind("  ", 0) != 0 || !figure.base || !figure.next) continue;  // the roles are indented
    const double delta = *figure.next - *figure.base;
    if (step_delta == 0 || (delta > 0) != (step_delta > 0)) continue;
    if (largest == nullptr || std::abs(delta) > std::abs(*largest->next - *largest->base)) largest = &figure;
  }
  if (largest == nullptr) return "";
  const double delta = *largest->next - *largest->base;
  return fmt::format("no key alone; the step breakdown's {} {:+.3f} ms a step, {:.0f} % of the change", largest->name.substr(2), delta,
                     100 * delta / step_delta);
}

inline std::string counts_sentence(const analysis::RunDiff& diff) {
  std::size_t keys = 0;
  for (const std::size_t count : diff.kinds) keys += count;
  return fmt::format("{} key{}: {} added, {} deleted, {} increased, {} decreased, {} unchanged in calls a step; {} beyond the "
                     "steps' noise (at most {:.0f} % of those by chance)",
                     keys, keys == 1 ? "" : "s", diff.kinds[0], diff.kinds[1], diff.kinds[2], diff.kinds[3], diff.kinds[4],
                     diff.significant, 100 * diff.options.false_discovery_rate);
}

inline std::string side_heading(std::string_view name, const DiffSide& side) {
  return fmt::format("{} {}: {}", name, side.title, analysis::detail::step_numbers(side.samples));
}

/// The key as the text table shows it: at most `width` characters, "..." where cut.
inline std::string key_cell(std::string_view key, std::size_t width) {
  std::string text = terminal_text(key);
  if (text.size() <= width) return text;
  std::size_t cut = width - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0u) == 0x80u) --cut;
  return text.substr(0, cut) + "...";
}

inline std::string change_cell(const analysis::KeyChange& change, analysis::KeyFigure figure) {
  const double before = change.base_of(figure).mean;
  const double after = change.next_of(figure).mean;
  if (before == after) return per_step_value(after, figure);
  return fmt::format("{} -> {}", per_step_value(before, figure), per_step_value(after, figure));
}

}  // namespace detail

/// The comparison of `next` against `base`, each one rank's analyses and samples keyed alike.
inline DiffReport make_diff_report(DiffSide base, DiffSide next, const analysis::DiffOptions& options = {}) {
  DiffReport report;
  report.diff = analysis::diff_runs(base.samples, next.samples, options);
  report.overview = detail::overview_figures(base.report, next.report);
  report.top_rows = base.report.options.top_rows;
  report.base = std::move(base);
  report.next = std::move(next);
  return report;
}

/// The comparison as terminal text, lines of at most 120 columns but for long keys in the lists.
inline std::string render_diff_text(const DiffReport& report) {
  const analysis::RunDiff& diff = report.diff;
  std::string out;
  out += fmt::format("dlprof-report --diff, by {}\n", analysis::to_string(diff.key));
  out += detail::terminal_text(detail::side_heading("BASE", report.base)) + "\n";
  out += detail::terminal_text(detail::side_heading("NEW ", report.next)) + "\n";
  for (const std::string& note : diff.notes) out += detail::wrap("Note: " + note, 120, "  ") + "\n";
  const auto [step_time, noise] = detail::step_time_sentence(diff.step_time);
  out += "\n" + step_time + (noise.empty() ? "" : "\n  " + noise) + "\n";
  if (diff.explaining.empty()) {
    const std::string role = detail::role_explaining(report);
    out += role.empty() ? "What explains it: no key changed beyond the steps' noise in the step time's direction.\n"
                        : "What explains it: " + role + ".\n";
  } else {
    out += "What explains it:\n";
    for (const std::size_t i : diff.explaining)
      out += "  " + detail::wrap(detail::terminal_text(detail::explaining_line(diff, diff.changes[i])), 118, "    ") + "\n";
  }

  out += fmt::format("\n{:<24} {:>16} {:>16}  {}\n", "Overview (per step)", "BASE", "NEW", "Change");
  for (const OverviewFigure& figure : report.overview)
    out += fmt::format("{:<24} {:>16} {:>16}  {}\n", figure.name, detail::overview_value(figure.base, figure.unit),
                       detail::overview_value(figure.next, figure.unit), detail::overview_change(figure));

  out += "\n" + detail::wrap(fmt::format("Changes by {}: {}", analysis::to_string(diff.key), detail::counts_sentence(diff)), 120, "  ") +
         "\n";
  const bool device = analysis::is_device_key(diff.key);
  const analysis::KeyFigure time = device ? analysis::KeyFigure::GpuSelf : analysis::KeyFigure::Self;
  constexpr std::size_t kKeyWidth = 40;
  out += fmt::format("{:<{}} {:<9} {:>15} {:>27} {:>9} {}\n", "Key", kKeyWidth, "Change", "Calls a step",
                     device ? "GPU a step" : "Self CPU a step", "p", "");
  const std::size_t shown = std::min(report.top_rows, diff.changes.size());
  for (std::size_t i = 0; i < shown; ++i) {
    const analysis::KeyChange& change = diff.changes[i];
    out += fmt::format("{:<{}} {:<9} {:>15} {:>27} {:>9} {}\n", detail::key_cell(change.key, kKeyWidth), kKeyWidth,
                       to_string(change.kind), detail::change_cell(change, analysis::KeyFigure::Calls),
                       detail::change_cell(change, time), detail::p_value_text(change.p_value),
                       change.significant ? "changed" : "noise");
  }
  if (shown < diff.changes.size())
    out += fmt::format("... {} more (--top N shows more; --format json lists every key)\n", diff.changes.size() - shown);
  return out;
}

/// The comparison as JSON (the keys are listed at the top of this header).
inline std::string render_diff_json(const DiffReport& report) {
  const analysis::RunDiff& diff = report.diff;
  fmt::memory_buffer out;
  detail::JsonTree json(out);
  json.begin_object();
  json.member("dlprof_version", DLPROF_VERSION_STRING);
  json.member_integer("diff_version", 1);
  json.member("key", analysis::to_string(diff.key));
  const auto side = [&](std::string_view name, const DiffSide& run) {
    json.key(name);
    json.begin_object();
    json.member("title", run.title);
    json.member_integer("rank", run.report.ranks.empty() ? 0 : run.report.ranks.front().rank);
    json.member_integer("steps", static_cast<std::int64_t>(run.samples.steps.size()));
    json.key("step_numbers");
    json.begin_array();
    for (const analysis::StepSample& step : run.samples.steps) json.integer(step.number);
    json.end_array();
    json.end_object();
  };
  side("base", report.base);
  side("new", report.next);
  json.key("notes");
  json.begin_array();
  for (const std::string& note : diff.notes) json.string(note);
  json.end_array();
  // A summary's members, in µs where `scale` is 1e3 (ns given), their names suffixed "_us" where
  // `suffixed`.
  const auto summary = [&](std::string_view name, const analysis::StepSummary& values, double scale, bool suffixed) {
    const std::string_view suffix = suffixed ? "_us" : "";
    json.key(name);
    json.begin_object();
    json.member_number(fmt::format("mean{}", suffix), values.mean / scale);
    json.member_number(fmt::format("median{}", suffix), values.median / scale);
    json.member_number(fmt::format("p25{}", suffix), values.p25 / scale);
    json.member_number(fmt::format("p75{}", suffix), values.p75 / scale);
    json.end_object();
  };
  json.key("step_time");
  json.begin_object();
  summary("base", diff.step_time.base, 1e3, true);
  summary("new", diff.step_time.next, 1e3, true);
  json.member_number("relative", diff.step_time.relative);
  json.member_number("relative_lower", diff.step_time.relative_lower);
  json.member_number("relative_upper", diff.step_time.relative_upper);
  json.member_number("p_value", diff.step_time.p_value);
  json.key("significant");
  json.boolean(diff.step_time.significant);
  json.end_object();
  json.key("explaining");
  json.begin_array();
  for (const std::size_t i : diff.explaining) {
    const analysis::KeyChange& change = diff.changes[i];
    json.begin_object();
    json.member("key", change.key);
    json.member("figure", analysis::to_string(change.impact_figure));
    json.member_number("delta_us", change.impact_ns / 1e3);
    json.key("share");
    if (diff.step_time.delta_ns() != 0) json.number(change.impact_ns / diff.step_time.delta_ns());
    else json.null();
    json.end_object();
  }
  json.end_array();
  json.member_text_or_null("explaining_role", detail::role_explaining(report));
  json.key("overview");
  json.begin_array();
  for (const OverviewFigure& figure : report.overview) {
    json.begin_object();
    json.member("name", std::string_view(figure.name).substr(figure.name.find_first_not_of(' ')));
    json.member("unit", figure.unit);
    json.key("base");
    json.optional_number(figure.base);
    json.key("new");
    json.optional_number(figure.next);
    json.end_object();
  }
  json.end_array();
  json.key("counts");
  json.begin_object();
  for (std::size_t kind = 0; kind < analysis::kKeyChangeKindCount; ++kind)
    json.member_integer(to_string(static_cast<analysis::KeyChangeKind>(kind)), static_cast<std::int64_t>(diff.kinds[kind]));
  json.member_integer("significant", static_cast<std::int64_t>(diff.significant));
  json.end_object();
  json.member_number("false_discovery_rate", diff.options.false_discovery_rate);
  json.key("changes");
  json.begin_array();
  for (const analysis::KeyChange& change : diff.changes) {
    json.begin_object();
    json.member("key", change.key);
    json.member("change", to_string(change.kind));
    json.key("significant");
    json.boolean(change.significant);
    json.member_number("p_value", change.p_value);
    json.member("impact_figure", analysis::to_string(change.impact_figure));
    json.member_number("impact_us", change.impact_ns / 1e3);
    for (const auto& [name, figures] : {std::make_pair("base", &change.base), std::make_pair("new", &change.next)}) {
      json.key(name);
      json.begin_object();
      for (std::size_t f = 0; f < analysis::kKeyFigureCount; ++f) {
        const auto figure = static_cast<analysis::KeyFigure>(f);
        const bool time = figure != analysis::KeyFigure::Calls && figure != analysis::KeyFigure::SelfCpuMemory &&
                          figure != analysis::KeyFigure::SelfDeviceMemory;
        summary(time ? fmt::format("{}_us", analysis::to_string(figure)) : std::string(analysis::to_string(figure)), (*figures)[f],
                time ? 1e3 : 1, false);
      }
      json.end_object();
    }
    json.end_object();
  }
  json.end_array();
  json.end_object();
  out.push_back('\n');
  return fmt::to_string(out);
}

/// The comparison as one self-contained HTML page.
inline std::string render_diff_html(const DiffReport& report) {
  const analysis::RunDiff& diff = report.diff;
  fmt::memory_buffer out;
  detail::HtmlOut html(out);
  const std::string title = fmt::format("dlprof diff: {} against {}", report.next.title, report.base.title);
  html.begin_page(title);
  html.element("p", fmt::format("By {}. dlprof {}.", analysis::to_string(diff.key), DLPROF_VERSION_STRING), "class=\"meta\"");
  html.raw("<ul class=\"meta\">\n");
  html.element("li", detail::side_heading("BASE", report.base));
  html.element("li", detail::side_heading("NEW", report.next));
  for (const std::string& note : diff.notes) html.element("li", "Note: " + note);
  html.raw("</ul>\n<section id=\"step-time\">\n");
  html.element("h2", "Step time");
  const auto [step_time, noise] = detail::step_time_sentence(diff.step_time);
  html.element("p", noise.empty() ? step_time : step_time + " " + noise);
  if (diff.explaining.empty()) {
    const std::string role = detail::role_explaining(report);
    html.element("p", role.empty() ? "No key changed beyond the steps' noise in the step time's direction." : "Explained by " + role + ".",
                 "class=\"muted\"");
  } else {
    html.raw("<ol class=\"actions\">\n");
    for (const std::size_t i : diff.explaining) html.element("li", detail::explaining_line(diff, diff.changes[i]));
    html.raw("</ol>\n");
  }
  html.raw("</section>\n<section id=\"overview\">\n");
  html.element("h2", "Overview, per step");
  std::vector<std::vector<std::string>> rows;
  for (const OverviewFigure& figure : report.overview)
    rows.push_back({figure.name, detail::overview_value(figure.base, figure.unit), detail::overview_value(figure.next, figure.unit),
                    detail::overview_change(figure)});
  html.table({"", "BASE", "NEW", "Change"}, rows);
  html.raw("</section>\n<section id=\"changes\">\n");
  html.element("h2", fmt::format("Changes by {}", analysis::to_string(diff.key)));
  html.element("p", detail::counts_sentence(diff));
  const bool device = analysis::is_device_key(diff.key);
  rows.clear();
  std::vector<std::string_view> full_names;
  for (std::size_t i = 0; i < std::min(report.top_rows, diff.changes.size()); ++i) {
    const analysis::KeyChange& change = diff.changes[i];
    full_names.push_back(change.key);
    std::vector<std::string> row{change.key, std::string(to_string(change.kind)),
                                 detail::change_cell(change, analysis::KeyFigure::Calls)};
    for (const analysis::KeyFigure figure : {analysis::KeyFigure::Self, analysis::KeyFigure::Total, analysis::KeyFigure::GpuSelf,
                                             analysis::KeyFigure::GpuTotal}) {
      if (device && (figure == analysis::KeyFigure::Self || figure == analysis::KeyFigure::Total)) continue;
      row.push_back(detail::change_cell(change, figure));
    }
    row.push_back(detail::p_value_text(change.p_value));
    row.push_back(change.significant ? "changed" : "noise");
    rows.push_back(std::move(row));
  }
  std::vector<std::string> headers{"Key", "Change", "Calls a step"};
  if (!device) {
    headers.emplace_back("Self CPU a step");
    headers.emplace_back("CPU total a step");
  }
  headers.emplace_back("GPU a step");
  headers.emplace_back("GPU total a step");
  headers.emplace_back("p");
  headers.emplace_back("");
  html.table(headers, rows, 0, full_names);
  if (rows.size() < diff.changes.size())
    html.element("p", fmt::format("{} more keys: --top N shows more; --format json lists every key.", diff.changes.size() - rows.size()),
                 "class=\"muted\"");
  html.raw("</section>\n</body>\n</html>\n");
  return fmt::to_string(out);
}

DLPROF_END_NAMESPACE
