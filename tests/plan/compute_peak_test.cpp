// The compute roofline's probe and arithmetic: a plausible positive peak for every ISA
// this CPU runs (loose bounds, no timing assertions), and the percentage exact.
#include <gtest/gtest.h>

#include "core/error.h"
#include "kernels/isa.h"
#include "plan/probe.h"

namespace ridge::plan {
namespace {

using kernels::Isa;

class ComputePeakByIsa : public ::testing::TestWithParam<Isa> {};

// Bounds loose enough for any machine, tight enough to catch a probe that times nothing
// (huge) or a loop the compiler dropped (zero): per core, 1 to 4000 G int8 ops/s on the
// vector units (the tile unit: up to 40000; Sapphire Rapids does about 7000) and 0.5 to
// 1000 GFLOP/s.
TEST_P(ComputePeakByIsa, IsPlausibleAndPositive) {
  const Isa isa = GetParam();
  if (!kernels::cpu_supports(isa)) GTEST_SKIP() << "skipped: no " << kernels::isa_name(isa);
  const ComputePeak p = measure_compute_peak(isa, 1, 0.02);
  EXPECT_EQ(p.threads, 1);
  EXPECT_EQ(p.isa, kernels::isa_name(isa));
  if (isa == Isa::kScalar) {
    EXPECT_EQ(p.int8_ops_per_s, 0.0);
    EXPECT_EQ(p.f32_flops_per_s, 0.0);
    return;
  }
  EXPECT_GT(p.int8_ops_per_s, 1e9);
  EXPECT_LT(p.int8_ops_per_s, isa == Isa::kAmxInt8 ? 4e13 : 4e12);
  EXPECT_GT(p.f32_flops_per_s, 5e8);
  EXPECT_LT(p.f32_flops_per_s, 1e12);
  EXPECT_FALSE(p.int8_method.empty());
  EXPECT_FALSE(p.f32_method.empty());
  EXPECT_EQ(p.int8_isa, p.isa);  // each ISA's own loop (amx_int8: tdpbssd)
}

INSTANTIATE_TEST_SUITE_P(Isas, ComputePeakByIsa, ::testing::ValuesIn(kernels::kAllIsas),
                         [](const auto& info) { return std::string(kernels::isa_name(info.param)); });

TEST(ComputePeak, RejectsBadThreadCounts) { EXPECT_THROW(measure_compute_peak(Isa::kScalar, 0), Error); }

// The seconds the work takes at the peaks over the seconds it took.
TEST(ComputeRoofline, PercentageIsIdealTimeOverActualTime) {
  ComputePeak peak;
  peak.int8_ops_per_s = 1e12;
  peak.f32_flops_per_s = 1e11;
  // 1e9 int8 ops per token at 100 tokens/s: 1e11 ops/s of 1e12, 10%.
  EXPECT_DOUBLE_EQ(compute_roofline_pct({1e9, 0}, 100, peak), 10.0);
  // f32 work at the f32 peak: 1e8 ops per token at 100 tokens/s of 1e11, 10%.
  EXPECT_DOUBLE_EQ(compute_roofline_pct({0, 1e8}, 100, peak), 10.0);
  // Both: 1 ms + 1 ms of ideal time per token at 100 tokens/s (10 ms each), 20%.
  EXPECT_DOUBLE_EQ(compute_roofline_pct({1e9, 1e8}, 100, peak), 20.0);
  // At the peak exactly: 100%.
  EXPECT_DOUBLE_EQ(compute_roofline_pct({2e9, 0}, 500, peak), 100.0);
  // Nothing to compare with: no work, no speed, or work without a peak.
  EXPECT_EQ(compute_roofline_pct({0, 0}, 100, peak), 0.0);
  EXPECT_EQ(compute_roofline_pct({1e9, 0}, 0, peak), 0.0);
  ComputePeak no_int8 = peak;
  no_int8.int8_ops_per_s = 0;
  EXPECT_EQ(compute_roofline_pct({1e9, 1e8}, 100, no_int8), 0.0);
}

}  // namespace
}  // namespace ridge::plan
