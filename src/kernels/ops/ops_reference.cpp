#include "kernels/ops/ops_reference.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace ridge::kernels {

double silu_reference(double x) { return x / (1.0 + std::exp(-x)); }

double gelu_reference(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

void rms_norm_reference(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n,
                        float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    double sum_squares = 0;
    for (int64_t i = 0; i < n; ++i) sum_squares += static_cast<double>(x[r * n + i]) * x[r * n + i];
    const double inv_rms = 1.0 / std::sqrt(sum_squares / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i)
      y[r * n + i] = static_cast<float>(x[r * n + i] * inv_rms * (weight ? weight[i] : 1.0));
  }
}

void softmax_reference(const float* x, float* y, int64_t n_rows, int64_t n) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    const double max_value = *std::max_element(xr, xr + n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(xr[i] - max_value);
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = static_cast<float>(std::exp(xr[i] - max_value) / sum);
  }
}

}  // namespace ridge::kernels
