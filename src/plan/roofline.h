// The roofline of batched decode, the arithmetic behind `ridge roofline`: how many FLOPs and
// bytes one decode step costs at a batch size, where that lands against a device's compute
// and memory-bandwidth roofs, the batch at which decode stops being memory-bound, and the
// best single-user tokens/s.
//
//   RooflineInput in{shape_from_preset(*find_model_preset("llama2-7b")),
//                    *find_device_preset("h100-sxm"), parse_weight_format("fp16"),
//                    parse_kv_format("fp16"), /*ctx=*/0, /*max_batch=*/1024};
//   RooflineReport r = compute_roofline(in);
//   r.single_user_tokens_per_s;  // ~249: 3.35 TB/s / 13.5 GB of weights per token
//
// One decode step of a batch of B sequences, each with ctx tokens of history:
//   FLOPs = B x (2 x params + 4 x n_head x d_head x sum over layers of min(ctx, window))
//           (a multiply-add per weight, plus q.k and p.v over the cached tokens)
//   bytes = weight bytes (read once for the whole batch) + B x KV bytes of one sequence
//   time  = max(FLOPs / peak, bytes / bandwidth)      tokens/s = B / time
// The ridge point is peak / bandwidth in FLOP/byte: decode is compute-bound once
// FLOPs / bytes reaches it. Counting every parameter (the embedding table too, which decode
// only indexes) and ignoring activations keeps this the simple, slightly pessimistic bound.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "plan/model_shape.h"
#include "plan/sizing.h"

namespace ridge::plan {

struct DeviceSpec {
  std::string id;           // "h100-sxm"
  std::string display;      // "NVIDIA H100 SXM 80GB"
  double peak_flops = 0.0;  // FLOP/s, dense
  double bandwidth = 0.0;   // bytes/s
  double memory_bytes = 0.0;
  std::string precision;    // what the peak is for: "bf16 dense, fp32 accumulate"
  std::string source;       // where the numbers come from (datasheet, or how measured)
};

const std::vector<DeviceSpec>& device_presets();
// Case-insensitive, ignoring '-', '_', ' '. Null if unknown ("this" is not a preset: it is
// measured, see probe.h).
const DeviceSpec* find_device_preset(std::string_view id);
std::string device_preset_ids();

struct RooflineInput {
  ModelShape model;
  DeviceSpec device;
  NumberFormat weights;
  NumberFormat kv;
  int64_t ctx = 0;        // tokens of history per sequence; >= 0
  int64_t max_batch = 1024;
};

struct RooflinePoint {
  int64_t batch = 0;
  double flops = 0.0;             // per step
  double bytes = 0.0;             // per step
  double intensity = 0.0;         // FLOP/byte
  double attainable_flops = 0.0;  // min(peak, bandwidth x intensity)
  double tokens_per_s = 0.0;      // whole batch
  bool compute_bound = false;
  bool fits_in_memory = true;     // weights + batch x KV <= device memory
};

struct RooflineReport {
  double weight_bytes = 0.0;
  double kv_bytes_per_sequence = 0.0;  // read per step, at ctx
  double flops_per_token = 0.0;
  double ridge_point = 0.0;            // FLOP/byte
  // Batch at which FLOPs/bytes reaches the ridge point; infinity when KV traffic grows as
  // fast as FLOPs (long contexts), so decode never becomes compute-bound at this ctx.
  double crossover_batch = 0.0;
  double single_user_tokens_per_s = 0.0;
  double weights_only_tokens_per_s = 0.0;  // bandwidth / weight bytes: the ctx = 0 bound
  int64_t max_batch_in_memory = -1;        // -1: unlimited (no KV at ctx 0)
  std::vector<RooflinePoint> points;       // batch 1, 2, 4, ... max_batch
  std::vector<RooflinePoint> curve;        // ~16 batch sizes per octave, for plots
};

RooflinePoint roofline_point(const RooflineInput& in, int64_t batch);
// Throws ridge::Error for ctx < 0, max_batch < 1, or a device without positive peak and
// bandwidth.
RooflineReport compute_roofline(const RooflineInput& in);

}  // namespace ridge::plan
