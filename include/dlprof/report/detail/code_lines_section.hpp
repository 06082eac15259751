// dlprof/report/detail/code_lines_section.hpp: the report's "Which line of code" section as the
// text and HTML renderers show it: the lines of the user's code whose ops took the most CPU time
// and launched the most GPU time, each with its top op and kernel.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/call_stacks.hpp"
#include "dlprof/config.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/report/detail/table_section.hpp"
#include "dlprof/report/make_report.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// A frame's text without its file's directories ("mnist_cnn.hpp(25): Net::forward(at::Tensor)"),
/// so that a terminal's narrow column keeps the file and line in view; other texts as they are.
inline std::string without_directories(std::string_view frame) {
  const std::size_t file_end = frame.find("): ");
  const std::size_t slash = file_end == std::string_view::npos ? std::string_view::npos : frame.rfind('/', file_end);
  return std::string(slash == std::string_view::npos ? frame : frame.substr(slash + 1));
}

inline TableSection code_lines_section(const RankReport& rank) {
  const analysis::CodeLines& code = rank.code_lines;
  TableSection section;
  section.title = fmt::format("Which line of code: ops by the innermost frame of your code in their call stacks ({} line{})",
                              code.lines, code.lines == 1 ? "" : "s");
  const auto share = [](std::int64_t part, std::int64_t whole) {
    return whole <= 0 ? std::string("-") : fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
  };
  section.headers = {"Line", "Self CPU", "Share", "GPU", "Share", "Calls", "Top op", "Top kernel"};
  // The lines by CPU time first, then those only the GPU ranking holds.
  std::vector<const analysis::CodeLine*> shown;
  for (const analysis::CodeLine& line : code.by_cpu) shown.push_back(&line);
  for (const analysis::CodeLine& line : code.by_gpu) {
    bool listed = false;
    for (const analysis::CodeLine* other : shown) listed = listed || other->line == line.line;
    if (!listed) shown.push_back(&line);
  }
  for (const analysis::CodeLine* line : shown)
    section.rows.push_back({line->line, KeyAverages::format_duration(line->self_cpu_ns), share(line->self_cpu_ns, code.self_cpu_ns),
                            line->gpu_ns == 0 ? std::string("-") : KeyAverages::format_duration(line->gpu_ns),
                            line->gpu_ns == 0 ? std::string("-") : share(line->gpu_ns, code.gpu_ns), std::to_string(line->ops),
                            line->top_op, line->top_kernel.empty() ? std::string("-") : line->top_kernel});
  if (!code.by_gpu.empty())
    section.lines.push_back(fmt::format("The line that launched the most GPU time: {} ({}, {} of the GPU time of ops with stacks).",
                                        code.by_gpu.front().line, KeyAverages::format_duration(code.by_gpu.front().gpu_ns),
                                        share(code.by_gpu.front().gpu_ns, code.gpu_ns)));
  if (!code.by_cpu.empty())
    section.lines.push_back(fmt::format("The line whose ops took the most CPU time: {} ({}, {} of the self CPU time of ops with stacks).",
                                        code.by_cpu.front().line, KeyAverages::format_duration(code.by_cpu.front().self_cpu_ns),
                                        share(code.by_cpu.front().self_cpu_ns, code.self_cpu_ns)));
  if (code.ops_in_libraries != 0)
    section.notes.push_back(fmt::format("{} of {} op calls have no frame of your code in their stacks (every frame is dlprof's, "
                                        "LibTorch's, CUDA's or the C/C++ libraries'): a deeper stack_depth reaches it",
                                        code.ops_in_libraries, code.ops_with_stacks));
  return section;
}

}  // namespace detail
DLPROF_END_NAMESPACE
