// dlprof/report/detail/text.hpp: what the report's renderers share: names shortened to a column,
// aligned text tables whose cells are terminal-safe (dlprof/detail/text.hpp), the words of the
// verdict, of a finding's saving, of the straggler and of the two communication shares, and the
// per-collective table's rows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/analysis.hpp"
#include "dlprof/analysis/collectives.hpp"
#include "dlprof/analysis/recommendations.hpp"
#include "dlprof/analysis/step_breakdown.hpp"
#include "dlprof/analysis/verdict.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/report/make_report.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// An op's GPU time: "–" where no GPU work is tied to it, never "0ns".
inline std::string gpu_time_cell(std::int64_t ns) {
  return ns == 0 ? std::string("\u2013") : KeyAverages::format_duration(ns);
}

/// The ops tables' memory columns, torch's, where the trace has allocations: self and total CPU
/// memory, then the GPU's ("Self CUDA Mem", or HIP's) where some were on a GPU.
inline std::vector<std::string> memory_headers(const RankReport& rank) {
  std::vector<std::string> headers;
  if (!rank.memory_activity) return headers;
  headers = {"Self CPU Mem", "CPU Mem"};
  if (rank.device_memory_activity)
    headers.insert(headers.end(), {fmt::format("Self {} Mem", rank.device_memory_name), fmt::format("{} Mem", rank.device_memory_name)});
  return headers;
}

/// An op's cells under memory_headers().
inline std::vector<std::string> memory_cells(const RankReport& rank, const KeyAverage& op) {
  std::vector<std::string> cells;
  if (!rank.memory_activity) return cells;
  cells = {KeyAverages::format_bytes(op.memory.self_cpu_bytes), KeyAverages::format_bytes(op.memory.cpu_bytes)};
  if (rank.device_memory_activity)
    cells.insert(cells.end(), {KeyAverages::format_bytes(op.memory.self_device_bytes), KeyAverages::format_bytes(op.memory.device_bytes)});
  return cells;
}

inline std::string top_ops_by_memory_title(const RankReport& rank) {
  return fmt::format("Top ops and ranges by the {} memory they allocated less what they released, self ({} of {})",
                     rank.device_memory_activity ? rank.device_memory_name : std::string("CPU"), rank.top_ops_by_memory.size(),
                     rank.op_names);
}

/// A kernel's Tensor Core (matrix-core) cell: "yes", "-", or "n/a" where the list cannot judge
/// the GPU's kernels.
inline std::string_view tensor_cores_cell(const std::optional<bool>& tensor_cores) {
  return !tensor_cores ? "n/a" : *tensor_cores ? "yes" : "-";
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
/// header and wherever add_rule() put one. Cells hold names from traces: they are made
/// terminal_text(), so that no control character reaches the terminal or breaks a row.
class TextTable {
 public:
  explicit TextTable(std::vector<TextColumn> columns) : columns_(std::move(columns)) {}

  void add_row(std::vector<std::string> cells) {
    cells.resize(columns_.size());
    for (std::size_t i = 0; i < cells.size(); ++i) {
      cells[i] = terminal_text(cells[i]);
      if (columns_[i].max_width != 0) cells[i] = shorten(cells[i], columns_[i].max_width);
    }
    rows_.push_back(std::move(cells));
  }
  /// A rule before the next row (before a total or an average).
  void add_rule() { rules_.push_back(rows_.size()); }
  std::size_t rows() const noexcept { return rows_.size(); }

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

/// A time per step for the eye: three significant digits or so, in ms (s from 10 s).
inline std::string short_ms(double ns) {
  const double ms = ns / 1e6;
  if (ms >= 10'000) return fmt::format("{:.1f} s", ms / 1e3);
  if (ms >= 100) return fmt::format("{:.0f} ms", ms);
  if (ms >= 10) return fmt::format("{:.1f} ms", ms);
  if (ms >= 1) return fmt::format("{:.2f} ms", ms);
  return fmt::format("{:.3f} ms", ms);
}

/// "The slow step: ProfilerStep#30 took 539.000 ms, 12.7x the median 42.400 ms of the 19 other
/// steps: stall 500.000 ms (new), aten::mm +2.100 ms"; of a hang dump, "The hung step:
/// ProfilerStep#25 had run 40215.000 ms at the dump, ...: wait_for_peer 40200.000 ms (new)".
inline std::string slow_step_sentence(const analysis::SlowStep& slow) {
  std::string text = fmt::format("The {} step: {} {} {:.3f} ms{}, {:.1f}x the median {:.3f} ms of the {} other step{}",
                                 slow.hung ? "hung" : "slow",
                                 slow.number >= 0 ? fmt::format("ProfilerStep#{}", slow.number) : std::string("the step"),
                                 slow.hung ? "had run" : "took", static_cast<double>(slow.duration_ns) / 1e6, slow.hung ? " at the dump" : "",
                                 slow.ratio(), slow.median_ns / 1e6, slow.other_steps,
                                 slow.other_steps == 1 ? "" : "s");
  for (std::size_t i = 0; i < slow.grew.size(); ++i) {
    const analysis::SlowStepKey& key = slow.grew[i];
    const std::string_view gpu = key.figure == analysis::KeyFigure::GpuSelf ? " on the GPU" : "";
    text += i == 0 ? ": " : ", ";
    text += key.added ? fmt::format("{} {:.3f} ms{} (new)", key.key, key.slow_ns / 1e6, gpu)
                      : fmt::format("{} +{:.3f} ms{}", key.key, (key.slow_ns - key.median_ns) / 1e6, gpu);
  }
  return text;
}

/// "Slow rank: rank 2 (the rank the others wait for) takes 60.123 ms more a step than rank 1, the
/// median rank: aten::addmm self CPU +58.000 ms a step, ..."
inline std::string slow_rank_sentence(const SlowRank& slow) {
  std::string text = fmt::format("Slow rank: rank {}{} takes {:.3f} ms {} a step than rank {}, the median rank", slow.rank,
                                 slow.straggler ? " (the rank the others wait for)" : "", std::abs(slow.step_delta_ns) / 1e6,
                                 slow.step_delta_ns >= 0 ? "more" : "less", slow.median_rank);
  if (slow.keys.empty()) return text + "; no key takes it 1 % of a step longer";
  for (std::size_t i = 0; i < slow.keys.size(); ++i) {
    const analysis::KeyChange& key = slow.keys[i];
    text += fmt::format("{}{} {} {:+.3f} ms a step", i == 0 ? ": " : ", ", key.key,
                        key.impact_figure == analysis::KeyFigure::GpuSelf ? "GPU" : "self CPU", key.impact_ns / 1e6);
  }
  return text;
}

inline std::string saving_of(const analysis::Recommendation& finding) {
  if (!finding.saves_time()) return std::string(to_string(finding.severity));
  return fmt::format("\u2248 {}/step, {:.1f}%", short_ms(finding.impact_ns), finding.share);
}

/// The verdict's sentence for a bound, completed by its share ("... 71.2% of it.").
inline std::string_view bound_sentence(analysis::Bound bound) noexcept {
  switch (bound) {
    case analysis::Bound::GpuCompute: return "GPU compute bounds the step: kernels run";
    case analysis::Bound::CommunicationWait: return "Communication bounds the step: collectives run with no computation";
    case analysis::Bound::MemoryCopies: return "Memory copies bound the step: copies and fills run alone";
    case analysis::Bound::Input: return "Input bounds the step: the DataLoader takes";
    case analysis::Bound::Host: return "The host bounds the step: CPU work and runtime calls take";
    case analysis::Bound::NoSteps: break;
  }
  return "";
}

/// The verdict's first sentence: what bounds the step, with its share.
inline std::string verdict_bound_sentence(const analysis::Verdict& verdict) {
  return fmt::format("{} {:.1f}% of it.", bound_sentence(verdict.bound), verdict.bound_share);
}

/// Why a rank's step needs no change, where no rule found time to save: how busy its GPUs are, how
/// far its streams' kernels run side by side, how much of its communication computation hides.
/// "Why: the GPU is busy 97.1% of the steps; its kernels add up to 1.9x the steps' span on 3
/// streams, running side by side; communication is 96.0% hidden under computation."
/// With several ranks, `rank` names the one described.
inline std::string healthy_step_sentence(const analysis::StepBreakdown& steps, const analysis::HtaAnalyses& hta,
                                         std::optional<std::int64_t> rank = std::nullopt) {
  if (steps.steps.empty() || steps.devices.empty()) return {};
  const double span = static_cast<double>(steps.steps.back().end_ns - steps.steps.front().start_ns);
  double kernel_ns = 0, busy = 0;
  for (const analysis::DeviceMetrics& device : steps.devices) {
    kernel_ns += static_cast<double>(device.kernel_ns);
    busy += device.utilization;
  }
  busy /= static_cast<double>(steps.devices.size());
  std::vector<std::string> parts = {steps.devices.size() == 1
                                        ? fmt::format("the GPU is busy {:.1f}% of the steps", 100.0 * busy)
                                        : fmt::format("the {} GPUs are busy {:.1f}% of the steps on average",
                                                      steps.devices.size(), 100.0 * busy)};
  if (span > 0 && kernel_ns >= 1.05 * span * static_cast<double>(steps.devices.size()))
    parts.push_back(fmt::format("{} kernels add up to {:.1f}x the steps' span on {} streams, running side by side",
                                steps.devices.size() == 1 ? "its" : "their", kernel_ns / span / static_cast<double>(steps.devices.size()),
                                hta.idle_time.streams.size()));
  if (hta.overlap.has_communication())
    parts.push_back(fmt::format("communication is {:.1f}% hidden under computation", hta.overlap.overlap_percent()));
  return fmt::format("Why{}: {}.", rank ? fmt::format(", on rank {}", *rank) : std::string(), fmt::join(parts, "; "));
}

/// healthy_step_sentence of the report's first rank, named where there are several.
inline std::string healthy_report_sentence(const Report& report) {
  if (report.ranks.empty()) return {};
  const RankReport& first = report.ranks.front();
  return healthy_step_sentence(first.steps, first.hta,
                               report.ranks.size() > 1 ? std::optional<std::int64_t>(first.rank) : std::nullopt);
}

/// The verdict's second sentence: the median step (and the mean where it differs), GPU busy.
inline std::string verdict_step_sentence(const analysis::Verdict& verdict) {
  std::string step = fmt::format("Step {} (median of {}", short_ms(verdict.median_step_ns), verdict.steps);
  if (verdict.mean_differs()) step += fmt::format("; mean {}", short_ms(verdict.mean_step_ns));
  step += ")";
  if (verdict.gpu_busy) step += fmt::format("; GPU busy {:.1f}%", 100.0 * *verdict.gpu_busy);
  if (verdict.mfu) step += fmt::format("; model FLOP utilization {:.1f}%", 100.0 * *verdict.mfu);
  return step + ".";
}

/// One flagged step in words: "step 3 (first calls, 675 ms: cudaLaunchKernel 675 ms)".
inline std::string left_out_step_text(const analysis::LeftOutStep& left_out, bool several_ranks) {
  const analysis::FlaggedStep& step = left_out.step;
  std::string out = several_ranks ? fmt::format("rank {} ", left_out.rank) : std::string();
  out += step.number >= 0 ? fmt::format("step {}", step.number) : std::string("the whole trace");
  switch (step.flag) {
    case analysis::StepFlag::FirstCalls: {
      std::vector<std::string> calls;
      for (const analysis::FirstCall& call : step.calls) calls.push_back(fmt::format("{} {}", call.name, short_ms(static_cast<double>(call.duration_ns))));
      return out + fmt::format(" (first calls, {}: {})", short_ms(static_cast<double>(step.ns)), fmt::join(calls, ", "));
    }
    case analysis::StepFlag::Outlier: return out + fmt::format(" ({:.2f}x the median step)", step.ratio_to_median);
    case analysis::StepFlag::MidFlight:
      return out + fmt::format(" (starts mid-flight: {} of GPU work launched before the window)", short_ms(static_cast<double>(step.ns)));
  }
  return out;
}

/// The steps the verdict leaves out, or judges though flagged, in a sentence; empty for none.
inline std::string left_out_sentence(const analysis::Verdict& verdict, bool several_ranks) {
  if (verdict.left_out.empty()) return {};
  constexpr std::size_t kShown = 5;
  std::vector<std::string> steps;
  for (std::size_t i = 0; i < verdict.left_out.size() && i < kShown; ++i)
    steps.push_back(left_out_step_text(verdict.left_out[i], several_ranks));
  if (verdict.left_out.size() > kShown) steps.push_back(fmt::format("and {} more", verdict.left_out.size() - kShown));
  return fmt::format(verdict.all_flagged ? "No step is steady, so the figures are of every step: {}."
                                         : "Left out as not the steady state: {}.",
                     fmt::join(steps, "; "));
}

/// The straggler in words, for the text and the page: who comes last, how late, and the phase
/// that makes it late where one does.
inline std::string straggler_sentence(const analysis::Straggler& s) {
  std::string sentence = fmt::format(
      "rank {}, last to arrive at {} of {} collectives, {:.3f} ms after the first rank on average: the others wait "
      "{:.3f} ms per step for it",
      s.rank, s.last_arrivals, s.instances, s.mean_lateness_ns / 1e6, s.held_back_ns / 1e6);
  if (s.phase)
    return sentence + fmt::format("; its {} takes {:.3f} ms per step against the other ranks' median {:.3f} ms ({:+.3f} ms).",
                                  to_string(*s.phase), s.phase_ns / 1e6, s.others_median_phase_ns / 1e6, s.excess_ns() / 1e6);
  return sentence + "; no annotated phase of its steps is longer than the other ranks'.";
}

/// Why the collectives name no straggler.
inline std::string no_straggler_sentence(const analysis::CollectiveAnalysis& collectives) {
  if (collectives.missing_ranks != 0)
    return fmt::format("not named: {} of the world's {} ranks have no trace here, and the others may all wait for one of them.",
                       collectives.missing_ranks, collectives.world_size);
  return "none (no rank holds the others back by more than 5% of the step).";
}

/// Why the step table's Communication is not HTA's communication share, where the two differ by
/// more than 10 points; empty otherwise. The step table gives the GPU's time to kernels first and
/// to communication only where nothing else runs (TensorBoard's roles); HTA's kernel types share
/// all kernel time, overlapped or not.
inline std::string communication_shares_note(const analysis::StepBreakdown& steps, const analysis::HtaAnalyses& hta) {
  const double average_step = steps.average_step_ns();
  if (average_step <= 0) return {};
  const double step_share = 100.0 * steps.average_ns()[static_cast<std::size_t>(analysis::StepRole::Communication)] / average_step;
  double kernel_share = 0;
  for (const analysis::KernelTypeTime& row : hta.kernel_types.times)
    if (row.has(analysis::KernelType::Communication)) kernel_share += row.percent;
  if (std::abs(kernel_share - step_share) <= 10.0) return {};
  std::string note = fmt::format(
      "Communication is {:.1f}% of the step above: its time where nothing else runs on the GPU (the roles claim time in "
      "order, kernels first) and only for the communication of nccl:* or gloo:* ops. Communication kernels take {:.1f}% "
      "of the GPU's kernel time (HTA's kernel types)",
      step_share, kernel_share);
  if (hta.overlap.has_communication())
    note += fmt::format(", {:.1f}% of it beside computation", hta.overlap.overlap_percent());
  return note + ".";
}

/// The per-collective table's columns and a collective's row in them, for the text and the page.
/// Sizes are unknown where the collectives are the communication kernels alone: "-".
inline constexpr std::string_view kCollectiveTypeColumns[] = {
    "Collective", "Calls", "Bytes/call", "Latency (ms)", "algbw (GB/s)", "busbw (GB/s)", "Wait (ms)", "Skew max (ms)"};

inline std::vector<std::string> collective_type_row(const analysis::CollectiveTypeStats& type) {
  const auto ms = [](double ns) { return fmt::format("{:.3f}", ns / 1e6); };
  const bool sized = type.has_bytes();
  return {type.name,
          std::to_string(type.calls),
          sized ? analysis::detail::format_bytes(static_cast<double>(type.bytes) / static_cast<double>(std::max<std::size_t>(type.calls, 1)))
                : "-",
          ms(type.latency_ns()),
          sized ? fmt::format("{:.3f}", type.algorithm_gbps()) : "-",
          sized ? fmt::format("{:.3f}", type.bus_gbps()) : "-",
          ms(type.mean_waiting_ns),
          ms(static_cast<double>(type.max_skew_ns))};
}

}  // namespace detail
DLPROF_END_NAMESPACE
