// Double-precision references for the row and elementwise kernels of ops/ops.h and ops/rope.h:
// the plain formulas the tests compare the fast kernels against. Not for the hot path.
//
//   rms_norm_reference(x, w, expected, n_rows, n, eps);
//   EXPECT_NEAR(got[i], expected[i], 1e-5 + 1e-4 * std::fabs(expected[i]));
#pragma once

#include <cstdint>

namespace ridge::kernels {

double silu_reference(double x);
double gelu_reference(double x);  // tanh approximation, as gelu()

void rms_norm_reference(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n,
                        float eps);
void softmax_reference(const float* x, float* y, int64_t n_rows, int64_t n);

}  // namespace ridge::kernels
