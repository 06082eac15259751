// dlprof/report.hpp: the report, where every millisecond of a training step went and what to do
// about it, from the traces of one run (one per rank): the step-time breakdown, the GPU summary,
// HTA's breakdowns, the top ops and kernels, nvprof's rows, the ranks compared and the
// recommendations with their evidence.
//
//   make_report.hpp  Report, ReportOptions, make_report(trace) / make_report(ranks)
//   text.hpp         render_text: terminal tables (also fmt::formatter<Report>)
//   json.hpp         render_json: for scripts (its keys are listed there)
//   html.hpp         render_html: one self-contained page, the views of TensorBoard's profiler
//                    plugin as tabs (viewer.hpp: their script and data; views.hpp and
//                    timeline.hpp: what the interactive ones hold; ReportOptions::views =
//                    rank_views_of makes it)
//   kernel_table.hpp render_kernel_table_text/csv/json/html: PyProf's kernel table with the
//                    roofline beside each kernel (dlprof-report --kernels)
//   diff.hpp         render_diff_text/json/html: two runs compared per step (dlprof-report --diff)
//   hta_diff.hpp     render_hta_diff_text/json/html: HTA's TraceDiff table (--diff --hta-compat)
//   gate.hpp         render_gate_text/junit: the regression gate's verdict (dlprof-report --baseline)
//
// In a program: `fmt::print("{}", prof.report())` after a window, or, in an on_trace_ready
// handler, `fmt::print("{}", dlprof::report(trace))`. Offline: the dlprof-report tool
// (tools/dlprof_report.cpp) reads trace files and prints any of the three.
#pragma once

#include <string>

#include "dlprof/config.hpp"
#include "dlprof/report/diff.hpp"
#include "dlprof/report/gate.hpp"
#include "dlprof/report/hta_diff.hpp"
#include "dlprof/report/html.hpp"
#include "dlprof/report/json.hpp"
#include "dlprof/report/kernel_table.hpp"
#include "dlprof/report/make_report.hpp"
#include "dlprof/report/text.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE

/// The text report of one trace: what an on_trace_ready handler prints.
///
///   .on_trace_ready([](const dlprof::Trace& trace) { fmt::print("{}", dlprof::report(trace)); })
inline std::string report(const Trace& trace, const ReportOptions& options = {}) {
  return render_text(make_report(trace, options));
}

namespace detail {
template <class Options>
struct TextReport;
/// What Profiler::report() prints.
template <>
struct TextReport<ReportOptions> {
  static std::string of(const Trace& trace, const ReportOptions& options) { return report(trace, options); }
};
}  // namespace detail

DLPROF_END_NAMESPACE
