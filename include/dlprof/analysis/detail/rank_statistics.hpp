// dlprof/analysis/detail/rank_statistics.hpp: the robust statistics by which two runs' per-step
// samples are compared (run_diff.hpp): quantiles, the Mann–Whitney U test (exact for small samples
// without ties, else the normal approximation with the tie correction), the Hodges–Lehmann shift
// and its Moses confidence bounds, and Benjamini–Hochberg's false-discovery control over many keys.
// Rank statistics ask nothing of the samples' distribution: step times are skewed (a slow step is
// far slower, a fast one barely faster) and often bimodal, which a t-test's normal errors are not.
// Student's t serves where the samples are runs, not steps: a run's median step time on a log
// scale, which is near normal, and of which there are too few (3 to 10) for ranks to reach 1 %.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {
namespace detail {

/// The q-quantile (0 ≤ q ≤ 1) of `values`, interpolated between the closest ranks (NumPy's and
/// pandas' default); 0 for no values.
inline double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double at = q * static_cast<double>(values.size() - 1);
  const auto low = static_cast<std::size_t>(std::floor(at));
  const std::size_t high = std::min(low + 1, values.size() - 1);
  return values[low] + (values[high] - values[low]) * (at - static_cast<double>(low));
}

inline double mean(const std::vector<double>& values) {
  if (values.empty()) return 0;
  double sum = 0;
  for (const double value : values) sum += value;
  return sum / static_cast<double>(values.size());
}

/// The standard normal distribution's upper tail, P(Z ≥ z).
inline double normal_upper_tail(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

/// The z with P(Z ≥ z) = p, 0 < p < 1 (Acklam's rational approximation, relative error 1.2e-9).
inline double normal_upper_quantile(double p) {
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                                 1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                 6.680131188771972e+01, -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                 -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00};
  const double lower = 1.0 - p;  // the quantile of the lower tail
  const auto tail = [&](double q) {
    const double r = std::sqrt(-2 * std::log(q));
    return (((((c[0] * r + c[1]) * r + c[2]) * r + c[3]) * r + c[4]) * r + c[5]) / ((((d[0] * r + d[1]) * r + d[2]) * r + d[3]) * r + 1);
  };
  if (lower < 0.02425) return tail(lower);
  if (lower > 1 - 0.02425) return -tail(1 - lower);
  const double q = lower - 0.5;
  const double r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

/// The regularised incomplete beta function I_x(a, b), by its continued fraction (Lentz's method).
inline double incomplete_beta(double x, double a, double b) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  // The fraction converges fast for x < (a + 1) / (a + b + 2); above, I_x(a, b) = 1 − I_{1−x}(b, a).
  if (x > (a + 1) / (a + b + 2)) return 1 - incomplete_beta(1 - x, b, a);
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x)) / a;
  constexpr double kTiny = 1e-300;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  d = 1 / (std::abs(d) < kTiny ? kTiny : d);
  double fraction = d;
  for (int m = 1; m <= 300; ++m) {
    for (const bool even : {true, false}) {
      const double numerator = even ? m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
                                    : -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
      d = 1 + numerator * d;
      d = 1 / (std::abs(d) < kTiny ? kTiny : d);
      c = 1 + numerator / c;
      if (std::abs(c) < kTiny) c = kTiny;
      fraction *= c * d;
    }
    if (std::abs(c * d - 1) < 1e-14) break;
  }
  return front * fraction;
}

/// P(T > t) for Student's t with `df` degrees of freedom.
inline double student_upper_tail(double t, double df) {
  const double tail = 0.5 * incomplete_beta(df / (df + t * t), df / 2, 0.5);
  return t >= 0 ? tail : 1 - tail;
}

/// The t with P(T > t) = p (0 < p < 1) for Student's t with `df` degrees of freedom.
inline double student_upper_quantile(double p, double df) {
  // The tail falls as t rises: bisect on an interval that holds the answer.
  double low = -1, high = 1;
  while (student_upper_tail(low, df) < p) low *= 2;
  while (student_upper_tail(high, df) > p) high *= 2;
  for (int i = 0; i < 200 && high - low > 1e-12 * std::max(1.0, std::abs(high)); ++i) {
    const double middle = (low + high) / 2;
    (student_upper_tail(middle, df) > p ? low : high) = middle;
  }
  return (low + high) / 2;
}


/// The Mann–Whitney U test of `second` against `first`: U counts the pairs in which second's value
/// exceeds first's (ties count a half).
struct MannWhitney {
  double u = 0;
  /// P(U ≥ u) and P(U ≤ u) under the hypothesis that both samples come from one distribution:
  /// second is larger, or smaller, by chance alone.
  double p_greater = 1;
  double p_less = 1;
  /// Two-sided.
  double p_value() const noexcept { return std::min(1.0, 2 * std::min(p_greater, p_less)); }
};

/// Pair counts up to which the exact distribution of U is used where the samples hold no ties.
inline constexpr std::size_t kExactMannWhitneyPairs = 2500;

inline MannWhitney mann_whitney(const std::vector<double>& first, const std::vector<double>& second) {
  MannWhitney result;
  const std::size_t n1 = first.size();
  const std::size_t n2 = second.size();
  if (n1 == 0 || n2 == 0) return result;
  // Ranks of the pooled samples, ties given their mean rank.
  std::vector<std::pair<double, bool>> pooled;  // (value, from second)
  pooled.reserve(n1 + n2);
  for (const double value : first) pooled.emplace_back(value, false);
  for (const double value : second) pooled.emplace_back(value, true);
  std::sort(pooled.begin(), pooled.end());
  const double n = static_cast<double>(n1 + n2);
  double second_rank_sum = 0;
  double tie_term = 0;  // Σ (t³ − t) over groups of t tied values
  for (std::size_t i = 0; i < pooled.size();) {
    std::size_t j = i;
    while (j < pooled.size() && pooled[j].first == pooled[i].first) ++j;
    const double rank = 0.5 * static_cast<double>(i + 1 + j);  // mean of ranks i + 1 .. j
    const double t = static_cast<double>(j - i);
    tie_term += t * t * t - t;
    for (std::size_t k = i; k < j; ++k)
      if (pooled[k].second) second_rank_sum += rank;
    i = j;
  }
  const double pairs = static_cast<double>(n1) * static_cast<double>(n2);
  result.u = second_rank_sum - static_cast<double>(n2) * static_cast<double>(n2 + 1) / 2;
  if (tie_term == 0 && n1 * n2 <= kExactMannWhitneyPairs) {
    // counts[u]: the arrangements of n1 and n2 values whose U is u, built up one value at a time.
    const auto max_u = n1 * n2;
    std::vector<std::vector<double>> previous(n2 + 1), current(n2 + 1);
    for (std::size_t b = 0; b <= n2; ++b) previous[b].assign(1, 1.0);  // no value of `first`: U is 0
    for (std::size_t a = 1; a <= n1; ++a) {
      current[0].assign(1, 1.0);
      for (std::size_t b = 1; b <= n2; ++b) {
        // The largest value is second's (it exceeds all a of first's) or first's (it adds nothing).
        std::vector<double>& counts = current[b];
        counts.assign(a * b + 1, 0.0);
        for (std::size_t u = 0; u < current[b - 1].size(); ++u) counts[u + a] += current[b - 1][u];
        for (std::size_t u = 0; u < previous[b].size(); ++u) counts[u] += previous[b][u];
      }
      std::swap(previous, current);
    }
    const std::vector<double>& counts = previous[n2];
    double total = 0;
    for (const double count : counts) total += count;
    const auto observed = static_cast<std::size_t>(std::llround(result.u));
    double at_least = 0, at_most = 0;
    for (std::size_t u = 0; u <= max_u; ++u) {
      if (u >= observed) at_least += counts[u];
      if (u <= observed) at_most += counts[u];
    }
    result.p_greater = at_least / total;
    result.p_less = at_most / total;
    return result;
  }
  const double variance = pairs / 12 * ((n + 1) - tie_term / (n * (n - 1)));
  if (variance <= 0) return result;  // every value alike
  const double sd = std::sqrt(variance);
  const double centre = pairs / 2;
  result.p_greater = normal_upper_tail((result.u - centre - 0.5) / sd);
  result.p_less = normal_upper_tail((centre - result.u - 0.5) / sd);
  return result;
}

/// Pairwise differences up to which the Hodges–Lehmann estimate uses every pair; beyond, each
/// sample is thinned evenly until it fits.
inline constexpr std::size_t kMaxHodgesLehmannPairs = std::size_t{1} << 22;

/// The Hodges–Lehmann estimate of how far `second` lies above `first` (the median of second_j −
/// first_i over all pairs), with its Moses bounds: the one-sided lower and upper bounds at
/// confidence 1 − alpha each.
struct ShiftEstimate {
  double shift = 0;
  double lower = 0;
  double upper = 0;
};

inline ShiftEstimate hodges_lehmann(std::vector<double> first, std::vector<double> second, double alpha) {
  ShiftEstimate result;
  if (first.empty() || second.empty()) return result;
  const auto thin = [](std::vector<double>& values, std::size_t keep) {
    if (values.size() <= keep) return;
    std::vector<double> kept;
    for (std::size_t i = 0; i < keep; ++i) kept.push_back(values[i * values.size() / keep]);
    values = std::move(kept);
  };
  const auto side = static_cast<std::size_t>(std::sqrt(static_cast<double>(kMaxHodgesLehmannPairs)));
  if (first.size() * second.size() > kMaxHodgesLehmannPairs) {
    thin(first, side);
    thin(second, side);
  }
  std::vector<double> differences;
  differences.reserve(first.size() * second.size());
  for (const double b : second)
    for (const double a : first) differences.push_back(b - a);
  std::sort(differences.begin(), differences.end());
  const std::size_t pairs = differences.size();
  result.shift = pairs % 2 == 1 ? differences[pairs / 2] : 0.5 * (differences[pairs / 2 - 1] + differences[pairs / 2]);
  const double n1 = static_cast<double>(first.size());
  const double n2 = static_cast<double>(second.size());
  const double z = normal_upper_quantile(alpha);
  const double c = std::floor(n1 * n2 / 2 - z * std::sqrt(n1 * n2 * (n1 + n2 + 1) / 12));
  if (c < 1) {  // too few pairs to bound it at this confidence
    result.lower = differences.front();
    result.upper = differences.back();
    return result;
  }
  const auto k = static_cast<std::size_t>(c);
  result.lower = differences[k - 1];
  result.upper = differences[pairs - k];
  return result;
}

/// Which of `p_values` are discoveries at false-discovery rate `q` (Benjamini–Hochberg): the
/// largest k whose k-th smallest p-value is at most k·q/m, and every p-value up to it.
inline std::vector<bool> benjamini_hochberg(const std::vector<double>& p_values, double q) {
  const std::size_t m = p_values.size();
  std::vector<std::size_t> order(m);
  for (std::size_t i = 0; i < m; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p_values[a] < p_values[b]; });
  std::size_t discoveries = 0;
  for (std::size_t k = 1; k <= m; ++k)
    if (p_values[order[k - 1]] <= static_cast<double>(k) * q / static_cast<double>(m)) discoveries = k;
  std::vector<bool> significant(m, false);
  for (std::size_t k = 0; k < discoveries; ++k) significant[order[k]] = true;
  return significant;
}

/// A robust standard deviation: 1.4826 × the median absolute deviation from the median (σ for
/// normal data, and no pull from a few outliers).
inline double robust_sigma(const std::vector<double>& values) {
  if (values.size() < 2) return 0;
  const double median = quantile(values, 0.5);
  std::vector<double> deviations;
  deviations.reserve(values.size());
  for (const double value : values) deviations.push_back(std::abs(value - median));
  return 1.4826 * quantile(std::move(deviations), 0.5);
}

}  // namespace detail
}  // namespace analysis
DLPROF_END_NAMESPACE
