// Small statistics for checking simulations: the chi-square goodness-of-fit test and the
// total-variation distance between two categorical distributions.
//
//   ChiSquare c = chi_square_test(counts, p);   // c.p_value: chance of a worse fit if counts ~ p
//   double tv = total_variation(p, q);          // (1/2) sum |p - q|
#pragma once

#include <cstdint>
#include <span>

namespace ridge::plan {

// Regularized upper incomplete gamma function Q(a, x) = Gamma(a, x) / Gamma(a); a > 0.
double upper_incomplete_gamma_q(double a, double x);

// P(X >= statistic) for X ~ chi-square with dof degrees of freedom.
double chi_square_p_value(double statistic, int dof);

struct ChiSquare {
  double statistic = 0.0;
  int dof = 0;
  double p_value = 1.0;
  int pooled_bins = 0;  // bins with expected count < 5, merged into one before testing
};

// Pearson's test of observed counts against probabilities p (same length, summing to 1).
// Bins whose expected count is below 5 are pooled so the chi-square approximation holds. A
// count in a bin with p = 0 makes the statistic infinite and the p-value 0.
ChiSquare chi_square_test(std::span<const int64_t> counts, std::span<const double> p);

double total_variation(std::span<const double> a, std::span<const double> b);

}  // namespace ridge::plan
