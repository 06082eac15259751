// Looking up the findings of dlprof::analysis::recommendations by rule id, for tests.
#pragma once

#include <dlprof/analysis/recommendations.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace dlprof_test {

/// The finding of rule `id`, or null.
inline const dlprof::analysis::Recommendation* finding_with_id(const std::vector<dlprof::analysis::Recommendation>& found,
                                                               std::string_view id) {
  for (const dlprof::analysis::Recommendation& finding : found)
    if (finding.id == id) return &finding;
  return nullptr;
}

/// "host_bound dtype_casts ": the rule ids found, for a failure's message.
inline std::string finding_ids(const std::vector<dlprof::analysis::Recommendation>& found) {
  std::string out;
  for (const dlprof::analysis::Recommendation& finding : found) out += finding.id + " ";
  return out;
}

}  // namespace dlprof_test
