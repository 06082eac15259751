// dlprof/analysis/detail/duration_stats.hpp: DurationStats grouped by name, in one pass and
// without a string per event.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dlprof/analysis/duration_stats.hpp"
#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis::detail {

/// Accumulates DurationStats by index into a trace's names; names spelled alike share a row even
/// at different indices.
class DurationStatsByName {
 public:
  explicit DurationStatsByName(const std::vector<std::string>& names)
      : names_(names), row_of_index_(names.size(), kNoRow) {}

  void add(std::uint32_t name, std::int64_t duration_ns) { add_to(row_for(name, names_[name]), duration_ns); }
  /// A row under a name that is not the trace's (nvprof's "[CUDA memcpy HtoD]").
  void add(std::string_view label, std::int64_t duration_ns) { add_to(row_for_text(label), duration_ns); }

  /// The rows with their standard deviations, in the order first seen.
  std::vector<DurationStats> rows() const {
    std::vector<DurationStats> out = rows_;
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i].stddev_ns = out[i].calls > 1 ? std::sqrt(squares_[i] / static_cast<double>(out[i].calls - 1)) : 0.0;
    return out;
  }

 private:
  static constexpr std::uint32_t kNoRow = UINT32_MAX;

  std::size_t row_for(std::uint32_t index, std::string_view text) {
    std::uint32_t& row = row_of_index_[index];
    if (row == kNoRow) row = static_cast<std::uint32_t>(row_for_text(text));
    return row;
  }
  std::size_t row_for_text(std::string_view text) {
    const auto [found, inserted] = row_of_text_.try_emplace(text, rows_.size());
    if (inserted) {
      DurationStats row;
      row.name = text;
      rows_.push_back(row);
      squares_.push_back(0.0);
    }
    return found->second;
  }
  // Welford's update: exact enough for sums of squares of ns durations, which overflow integers.
  void add_to(std::size_t row_index, std::int64_t duration_ns) {
    DurationStats& row = rows_[row_index];
    const double value = static_cast<double>(duration_ns);
    row.min_ns = row.calls == 0 ? duration_ns : std::min(row.min_ns, duration_ns);
    row.max_ns = row.calls == 0 ? duration_ns : std::max(row.max_ns, duration_ns);
    ++row.calls;
    row.total_ns += duration_ns;
    const double delta = value - row.mean_ns;
    row.mean_ns += delta / static_cast<double>(row.calls);
    squares_[row_index] += delta * (value - row.mean_ns);
  }

  const std::vector<std::string>& names_;
  std::vector<std::uint32_t> row_of_index_;
  std::unordered_map<std::string_view, std::size_t> row_of_text_;
  std::vector<DurationStats> rows_;
  std::vector<double> squares_;
};

/// Sorts rows by total time, longest first, then by name so that ties read the same every run.
inline void sort_by_total(std::vector<DurationStats>& rows) {
  std::sort(rows.begin(), rows.end(), [](const DurationStats& a, const DurationStats& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
  });
}

}  // namespace analysis::detail
DLPROF_END_NAMESPACE
