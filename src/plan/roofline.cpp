#include "plan/roofline.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace ridge::plan {
namespace {

std::string normalized(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '-' && c != '_' && c != ' ') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct StepCost {
  double weight_bytes, kv_bytes, flops_per_token;
};

StepCost step_cost(const RooflineInput& in) {
  const ModelShape& m = in.model;
  double attended = 0.0;  // sum over layers of the tokens each layer attends to
  for (int32_t w : m.layer_window) attended += static_cast<double>(w > 0 ? std::min<int64_t>(in.ctx, w) : in.ctx);
  return {weight_bytes(m, in.weights), kv_bytes_for_context(m, in.kv.bytes_per_value, in.ctx),
          2.0 * static_cast<double>(m.n_params) + 4.0 * m.n_head * m.d_head * attended};
}

}  // namespace

const std::vector<DeviceSpec>& device_presets() {
  // Datasheet numbers: dense tensor-core throughput (no 2:4 sparsity) and HBM/GDDR bandwidth.
  static const std::vector<DeviceSpec> devices = {
      {"h100-sxm", "NVIDIA H100 SXM 80GB", 989.4e12, 3.35e12, 80e9, "bf16 dense tensor core",
       "NVIDIA H100 datasheet (989.4 TFLOP/s bf16 dense, 3.35 TB/s HBM3)"},
      {"h200", "NVIDIA H200 SXM 141GB", 989.4e12, 4.8e12, 141e9, "bf16 dense tensor core",
       "NVIDIA H200 datasheet (989 TFLOP/s bf16 dense, 4.8 TB/s HBM3e)"},
      {"a100-80gb-sxm", "NVIDIA A100 SXM 80GB", 312e12, 2.039e12, 80e9, "bf16 dense tensor core",
       "NVIDIA A100 datasheet (312 TFLOP/s bf16 dense, 2,039 GB/s HBM2e)"},
      {"rtx4090", "NVIDIA GeForce RTX 4090 24GB", 165.2e12, 1.008e12, 24e9, "bf16 dense, fp32 accumulate",
       "Ada Lovelace whitepaper (165.2 TFLOP/s bf16 with fp32 accumulate, 1,008 GB/s GDDR6X)"},
  };
  return devices;
}

const DeviceSpec* find_device_preset(std::string_view id) {
  const std::string key = normalized(id);
  for (const DeviceSpec& d : device_presets())
    if (normalized(d.id) == key) return &d;
  return nullptr;
}

std::string device_preset_ids() {
  std::string out;
  for (const DeviceSpec& d : device_presets()) out += str_cat(out.empty() ? "" : ", ", d.id);
  return out;
}

RooflinePoint roofline_point(const RooflineInput& in, int64_t batch) {
  const StepCost c = step_cost(in);
  RooflinePoint p;
  p.batch = batch;
  p.flops = static_cast<double>(batch) * c.flops_per_token;
  p.bytes = c.weight_bytes + static_cast<double>(batch) * c.kv_bytes;
  p.intensity = p.flops / p.bytes;
  p.attainable_flops = std::min(in.device.peak_flops, in.device.bandwidth * p.intensity);
  const double seconds = std::max(p.flops / in.device.peak_flops, p.bytes / in.device.bandwidth);
  p.tokens_per_s = static_cast<double>(batch) / seconds;
  p.compute_bound = p.flops / in.device.peak_flops >= p.bytes / in.device.bandwidth;
  p.fits_in_memory = in.device.memory_bytes <= 0 || p.bytes <= in.device.memory_bytes;
  return p;
}

RooflineReport compute_roofline(const RooflineInput& in) {
  if (in.ctx < 0) throw Error(str_cat("--ctx ", in.ctx, ": the context must be 0 or more tokens"));
  if (in.max_batch < 1) throw Error(str_cat("--max-batch ", in.max_batch, ": must be at least 1"));
  if (!(in.device.peak_flops > 0) || !(in.device.bandwidth > 0))
    throw Error(str_cat("device '", in.device.id, "': peak FLOP/s and bandwidth must be positive"));

  const StepCost c = step_cost(in);
  RooflineReport r;
  r.weight_bytes = c.weight_bytes;
  r.kv_bytes_per_sequence = c.kv_bytes;
  r.flops_per_token = c.flops_per_token;
  r.ridge_point = in.device.peak_flops / in.device.bandwidth;
  // B F / (W + B K) = R  =>  B = R W / (F - R K), when F > R K.
  const double margin = c.flops_per_token - r.ridge_point * c.kv_bytes;
  r.crossover_batch = margin > 0 ? r.ridge_point * c.weight_bytes / margin : std::numeric_limits<double>::infinity();
  r.single_user_tokens_per_s = roofline_point(in, 1).tokens_per_s;
  r.weights_only_tokens_per_s = in.device.bandwidth / c.weight_bytes;
  if (c.kv_bytes > 0 && in.device.memory_bytes > 0)
    r.max_batch_in_memory = std::max<int64_t>(0, static_cast<int64_t>(std::floor((in.device.memory_bytes - c.weight_bytes) / c.kv_bytes)));

  for (int64_t b = 1; b <= in.max_batch; b *= 2) r.points.push_back(roofline_point(in, b));
  int64_t last = 0;
  for (int i = 0;; ++i) {
    const int64_t b = std::min<int64_t>(in.max_batch, std::llround(std::pow(2.0, i / 16.0)));
    if (b != last) r.curve.push_back(roofline_point(in, b));
    last = b;
    if (b >= in.max_batch) break;
  }
  return r;
}

}  // namespace ridge::plan
