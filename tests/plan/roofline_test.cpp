#include "plan/roofline.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "plan/probe.h"

namespace ridge::plan {
namespace {

RooflineInput input(const char* model, const char* device, const char* weights, int64_t ctx) {
  RooflineInput in;
  in.model = shape_from_preset(*find_model_preset(model));
  in.device = *find_device_preset(device);
  in.weights = parse_weight_format(weights);
  in.kv = parse_kv_format("fp16");
  in.ctx = ctx;
  in.max_batch = 1024;
  return in;
}

TEST(Roofline, DevicePresets) {
  EXPECT_NEAR(find_device_preset("h100-sxm")->peak_flops / 1e12, 990, 1);
  EXPECT_EQ(find_device_preset("H100 SXM")->bandwidth, 3.35e12);
  EXPECT_EQ(find_device_preset("h200")->bandwidth, 4.8e12);
  EXPECT_EQ(find_device_preset("a100-80gb-sxm")->peak_flops, 312e12);
  EXPECT_EQ(find_device_preset("a100-80gb-sxm")->bandwidth, 2.039e12);
  EXPECT_EQ(find_device_preset("rtx4090")->peak_flops, 165.2e12);
  EXPECT_EQ(find_device_preset("rtx4090")->bandwidth, 1.008e12);
  EXPECT_EQ(find_device_preset("tpu-v5"), nullptr);
}

// "7B fp16 on H100 is about 240 tokens/s": bandwidth / bytes per token.
TEST(Roofline, SevenBillionFp16OnH100) {
  RooflineReport r = compute_roofline(input("llama2-7b", "h100-sxm", "fp16", 0));
  EXPECT_NEAR(r.single_user_tokens_per_s, 3.35e12 / (2.0 * 6'738'415'616), 1e-6);  // 248.6
  EXPECT_NEAR(r.single_user_tokens_per_s, 240, 10);
  // With 1,024 tokens of MHA history (0.54 GB of KV) it is 239.
  r = compute_roofline(input("llama2-7b", "h100-sxm", "fp16", 1024));
  EXPECT_NEAR(r.kv_bytes_per_sequence, 1024 * 524288.0, 1e-6);
  EXPECT_NEAR(r.single_user_tokens_per_s, 3.35e12 / (2.0 * 6'738'415'616 + 1024 * 524288.0), 1e-6);
  EXPECT_NEAR(r.weights_only_tokens_per_s, 248.6, 0.1);
  // H200: same model, 4.8 TB/s.
  EXPECT_NEAR(compute_roofline(input("llama2-7b", "h200", "fp16", 0)).single_user_tokens_per_s, 356.2, 0.1);
}

TEST(Roofline, RidgePointAndCrossover) {
  RooflineReport r = compute_roofline(input("llama2-7b", "h100-sxm", "fp16", 0));
  EXPECT_NEAR(r.ridge_point, 989.4e12 / 3.35e12, 1e-9);  // 295.3 FLOP/byte
  // At ctx 0 with 2 bytes per parameter and 2 FLOPs per parameter per token, intensity = B:
  // the crossover batch is the ridge point itself.
  EXPECT_NEAR(r.crossover_batch, r.ridge_point, 1e-6);
  EXPECT_FALSE(roofline_point(input("llama2-7b", "h100-sxm", "fp16", 0), 295).compute_bound);
  EXPECT_TRUE(roofline_point(input("llama2-7b", "h100-sxm", "fp16", 0), 296).compute_bound);
  // Fewer bytes per weight: compute-bound at proportionally smaller batches.
  EXPECT_NEAR(compute_roofline(input("llama2-7b", "h100-sxm", "int8", 0)).crossover_batch, r.ridge_point / 2, 1e-6);
  EXPECT_NEAR(compute_roofline(input("llama2-7b", "h100-sxm", "int4", 0)).crossover_batch, r.ridge_point / 4, 1e-6);
  EXPECT_NEAR(compute_roofline(input("llama2-7b", "a100-80gb-sxm", "fp16", 0)).ridge_point, 153.0, 0.1);
}

TEST(Roofline, LongContextNeverTurnsComputeBound) {
  // Llama 2 7B (MHA) at 1,024 tokens: each sequence reads 0.54 GB of KV for 14 GFLOP, 26
  // FLOP/byte, far under the ridge point, so no batch size reaches it.
  RooflineReport r = compute_roofline(input("llama2-7b", "h100-sxm", "fp16", 1024));
  EXPECT_TRUE(std::isinf(r.crossover_batch));
  for (const RooflinePoint& p : r.points) EXPECT_FALSE(p.compute_bound) << p.batch;
  // GQA at short context still crosses over, later than at ctx 0.
  RooflineReport g = compute_roofline(input("llama3-8b", "h100-sxm", "bf16", 64));
  RooflineReport g0 = compute_roofline(input("llama3-8b", "h100-sxm", "bf16", 0));
  EXPECT_TRUE(std::isfinite(g.crossover_batch));
  EXPECT_GT(g.crossover_batch, g0.crossover_batch);
}

TEST(Roofline, PointsByHand) {
  const RooflineInput in = input("llama3-8b", "h100-sxm", "bf16", 1000);
  const RooflinePoint p = roofline_point(in, 16);
  const double params = 8'030'261'248.0;
  const double flops = 16 * (2 * params + 4.0 * 32 * 128 * 32 * 1000);
  const double bytes = 2 * params + 16 * (131072.0 * 1000);
  EXPECT_NEAR(p.flops, flops, 1);
  EXPECT_NEAR(p.bytes, bytes, 1);
  EXPECT_NEAR(p.intensity, flops / bytes, 1e-9);
  EXPECT_NEAR(p.tokens_per_s, 16 / std::max(flops / 989.4e12, bytes / 3.35e12), 1e-6);
  EXPECT_NEAR(p.attainable_flops, 3.35e12 * flops / bytes, 1);
}

TEST(Roofline, ThroughputGrowsWithBatchAndMemoryLimitsIt) {
  const RooflineReport r = compute_roofline(input("llama3-70b", "h100-sxm", "fp16", 8192));
  for (size_t i = 1; i < r.points.size(); ++i) EXPECT_GE(r.points[i].tokens_per_s, r.points[i - 1].tokens_per_s);
  // 70B in fp16 (141 GB) does not fit one 80 GB H100 at all.
  EXPECT_EQ(r.max_batch_in_memory, 0);
  EXPECT_FALSE(r.points[0].fits_in_memory);
  const RooflineReport s = compute_roofline(input("llama3-8b", "h100-sxm", "bf16", 8192));
  // (80 GB - 16.06 GB) / (128 KiB x 8192) = 59.5
  EXPECT_EQ(s.max_batch_in_memory, 59);
  EXPECT_GE(r.curve.size(), r.points.size());
  EXPECT_EQ(r.curve.back().batch, 1024);
}

TEST(Roofline, RejectsBadInput) {
  RooflineInput in = input("llama3-8b", "h100-sxm", "bf16", -1);
  EXPECT_THROW(compute_roofline(in), Error);
  in.ctx = 0;
  in.max_batch = 0;
  EXPECT_THROW(compute_roofline(in), Error);
  in.max_batch = 8;
  in.device.bandwidth = 0;
  EXPECT_THROW(compute_roofline(in), Error);
}

// The probes measure something physical: bounds loose enough for any machine, tight enough
// to catch a probe that times nothing (infinite) or reads nothing (zero).
TEST(Probe, MeasuresPlausibleBandwidthAndPeak) {
  const double gbs = measure_read_bandwidth_gbs(1, size_t{64} << 20, 2);
  EXPECT_GT(gbs, 0.5);
  EXPECT_LT(gbs, 5000);
  const PeakEstimate peak = estimate_peak_flops(1, 0.05);
  if (kernels::cpu_supports(kernels::Isa::kAvx2)) {
    EXPECT_GT(peak.flops, 1e9);     // > 1 GFLOP/s on one core
    EXPECT_LT(peak.flops, 1e12);    // < 1 TFLOP/s on one core
    EXPECT_GT(peak.implied_clock_ghz, 0.1);
    EXPECT_LT(peak.implied_clock_ghz, 8.0);
  } else {
    EXPECT_EQ(peak.flops, 0.0);
  }
  EXPECT_THROW(measure_read_bandwidth_gbs(0), Error);
}

}  // namespace
}  // namespace ridge::plan
