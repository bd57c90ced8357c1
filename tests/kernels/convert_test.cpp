// The F16C row conversion agrees with the bit-exact scalar fp16_to_fp32 on every
// non-NaN half, at every tail length.
#include "kernels/ops/convert.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "kernels/isa.h"

namespace ridge::kernels {
namespace {

TEST(Convert, F16ToF32MatchesScalarOnEveryNonNanHalf) {
  std::vector<uint16_t> halves;
  for (uint32_t h = 0; h < 65536; ++h)
    if (((h >> 10) & 0x1f) != 0x1f || (h & 0x3ff) == 0) halves.push_back(static_cast<uint16_t>(h));  // skip NaNs
  std::vector<float> got(halves.size());
  f16_to_f32(halves.data(), got.data(), static_cast<int64_t>(halves.size()));
  for (size_t i = 0; i < halves.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(fp16_to_fp32(halves[i])))
        << "half 0x" << std::hex << halves[i];
  if (cpu_supports(Isa::kAvx2)) {
    for (int64_t n : {1, 7, 8, 9, 23}) {  // tails after the 8-wide body
      std::vector<float> part(static_cast<size_t>(n));
      f16_to_f32_f16c(halves.data() + 1000, part.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(part[i], fp16_to_fp32(halves[1000 + i])) << n;
    }
  }
}

}  // namespace
}  // namespace ridge::kernels
