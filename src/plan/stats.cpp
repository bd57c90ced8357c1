#include "plan/stats.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace ridge::plan {

double upper_incomplete_gamma_q(double a, double x) {
  if (!(a > 0)) throw Error(str_cat("upper_incomplete_gamma_q: a = ", a, " must be > 0"));
  if (x <= 0.0) return 1.0;
  if (std::isinf(x)) return 0.0;
  const double log_prefix = a * std::log(x) - x - std::lgamma(a);
  if (x < a + 1.0) {
    // P(a, x) by its power series; Q = 1 - P.
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 100000 && std::fabs(term) > std::fabs(sum) * 1e-16; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return std::max(0.0, 1.0 - sum * std::exp(log_prefix));
  }
  // Q(a, x) by its continued fraction, evaluated with the modified Lentz method.
  const double tiny = 1e-300;
  double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
  for (int i = 1; i < 100000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < 1e-16) break;
  }
  return std::exp(log_prefix) * h;
}

double chi_square_p_value(double statistic, int dof) {
  if (dof < 1) throw Error(str_cat("chi_square_p_value: dof = ", dof, " must be >= 1"));
  return upper_incomplete_gamma_q(dof / 2.0, statistic / 2.0);
}

ChiSquare chi_square_test(std::span<const int64_t> counts, std::span<const double> p) {
  if (counts.size() != p.size())
    throw Error(str_cat("chi_square_test: ", counts.size(), " counts for ", p.size(), " probabilities"));
  double n = 0.0;
  for (int64_t c : counts) n += static_cast<double>(c);
  ChiSquare out;
  std::vector<double> observed, expected;
  double pooled_observed = 0.0, pooled_expected = 0.0;
  for (size_t j = 0; j < p.size(); ++j) {
    if (p[j] <= 0.0) {
      if (counts[j] > 0) {
        out.statistic = std::numeric_limits<double>::infinity();
        out.p_value = 0.0;
      }
      continue;
    }
    const double e = p[j] * n;
    if (e < 5.0) {
      pooled_observed += static_cast<double>(counts[j]);
      pooled_expected += e;
      ++out.pooled_bins;
    } else {
      observed.push_back(static_cast<double>(counts[j]));
      expected.push_back(e);
    }
  }
  if (pooled_expected > 0.0) {
    if (pooled_expected >= 5.0 || expected.empty()) {
      observed.push_back(pooled_observed);
      expected.push_back(pooled_expected);
    } else {
      // Still too small on its own: fold it into the smallest regular bin.
      size_t smallest = 0;
      for (size_t j = 1; j < expected.size(); ++j)
        if (expected[j] < expected[smallest]) smallest = j;
      observed[smallest] += pooled_observed;
      expected[smallest] += pooled_expected;
    }
  }
  out.dof = static_cast<int>(expected.size()) - 1;
  if (std::isinf(out.statistic)) return out;
  for (size_t j = 0; j < expected.size(); ++j)
    out.statistic += (observed[j] - expected[j]) * (observed[j] - expected[j]) / expected[j];
  out.p_value = out.dof >= 1 ? chi_square_p_value(out.statistic, out.dof) : 1.0;
  return out;
}

double total_variation(std::span<const double> a, std::span<const double> b) {
  if (a.size() != b.size())
    throw Error(str_cat("total_variation: distributions of ", a.size(), " and ", b.size(), " tokens"));
  double sum = 0.0;
  for (size_t j = 0; j < a.size(); ++j) sum += std::fabs(a[j] - b[j]);
  return 0.5 * sum;
}

}  // namespace ridge::plan
