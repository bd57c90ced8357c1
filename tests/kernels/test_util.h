// Shared helpers for the kernel tests: seeded random data and the tolerance check.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace ridge::kernels::testing {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// |got - ref| <= abs + rel * |ref|, the llm.c style check used for every kernel.
inline bool close(double got, double ref, double abs = 1e-5, double rel = 1e-4) {
  return std::fabs(got - ref) <= abs + rel * std::fabs(ref);
}

}  // namespace ridge::kernels::testing
