#include "kernels/ops/hadamard.h"

#include <cassert>
#include <cmath>

namespace ridge::kernels {

KvRotation kv_rotation(bool quantized_cache, int64_t d_head) {
  if (!quantized_cache || d_head <= 0 || d_head % 64 != 0) return {};
  int64_t k = 64;
  while (d_head % (2 * k) == 0) k *= 2;
  return {k, 64};
}

void hadamard_rotate(float* x, int64_t n, int64_t block) {
  if (block == 0) return;
  assert(block > 0 && (block & (block - 1)) == 0 && n % block == 0);
  const float norm = 1.0f / std::sqrt(static_cast<float>(block));
  for (float* b = x; b < x + n; b += block) {
    // The fast transform: log2(block) butterfly passes over pairs h apart.
    for (int64_t h = 1; h < block; h *= 2) {
      for (int64_t i = 0; i < block; i += 2 * h) {
        for (int64_t j = i; j < i + h; ++j) {
          const float a = b[j], c = b[j + h];
          b[j] = a + c;
          b[j + h] = a - c;
        }
      }
    }
    for (int64_t i = 0; i < block; ++i) b[i] *= norm;
  }
}

}  // namespace ridge::kernels
