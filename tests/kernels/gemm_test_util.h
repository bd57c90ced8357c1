// Shared helpers for the quantized-GEMM tests: weight blocks of random bytes (every bit
// pattern of nibbles, high bits and scales, with finite f16 scales) and one kernel call
// over a batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "kernels/gemm/table.h"
#include "test_util.h"

namespace ridge::kernels::testing {

// Random bytes for every block, with the f16 scale fields set to small finite values so
// that the dot product stays finite.
inline std::vector<uint8_t> random_weight_bytes(DType type, int64_t n_in, int64_t n_rows, uint32_t seed) {
  const TypeTraits& t = type_traits(type);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  const size_t row = row_size(type, n_in);
  std::vector<uint8_t> bytes(row * static_cast<size_t>(n_rows));
  if (t.row_header > 0) {  // the runtime formats: each row quantized, its statistics first
    const auto values = random_floats(static_cast<size_t>(n_in * n_rows), seed, 0.05f);
    for (int64_t r = 0; r < n_rows; ++r) t.from_float(values.data() + r * n_in, bytes.data() + r * row, n_in);
    return bytes;
  }
  for (auto& b : bytes) b = static_cast<uint8_t>(byte(rng));
  auto put_f16 = [&](uint8_t* p) {
    const uint16_t h = fp32_to_fp16(scale(rng));
    std::memcpy(p, &h, sizeof(h));
  };
  const int64_t n_blocks = n_rows * (n_in / t.block_size);
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* blk = bytes.data() + b * t.type_size;
    switch (type) {
      case DType::Q8_0: case DType::Q4_0: case DType::Q5_0: put_f16(blk); break;
      case DType::Q4_K: case DType::Q5_K: case DType::Q4_1: case DType::Q5_1: put_f16(blk); put_f16(blk + 2); break;
      case DType::Q6_K: put_f16(blk + offsetof(BlockQ6_K, d)); break;
      case DType::F16: put_f16(blk); break;
      case DType::F32: {
        const float v = scale(rng) * 50;
        std::memcpy(blk, &v, sizeof(v));
        break;
      }
      case DType::BF16: {
        const uint16_t h = fp32_to_bf16(scale(rng) * 50);
        std::memcpy(blk, &h, sizeof(h));
        break;
      }
      default: break;
    }
  }
  return bytes;
}

// Runs one GEMM kernel over n_rows x n_tokens (ldy wider than the tile, -7 elsewhere)
// with the transposed Q8_0 tables when the batch path wants them, as matmul does.
inline std::vector<float> run_gemm(GemmFn fn, ActFormat act_format, const std::vector<uint8_t>& w, size_t w_stride,
                            const std::vector<uint8_t>& act, size_t stride, int64_t n, int64_t n_rows,
                            int64_t n_tokens, int64_t ldy) {
  std::vector<float> y(static_cast<size_t>(ldy * n_tokens), -7.0f);
  GemmArgs args{n, w.data(), w_stride, act.data(), stride, y.data(), ldy};
  std::vector<float> scales_t;
  if (act_format == ActFormat::kQ8_0 && n_tokens > 1) {
    scales_t.resize(2 * q8_0_scales_t_floats(n, n_tokens));  // scales, then block sums
    transpose_q8_0_scales(act.data(), stride, n, n_tokens, scales_t.data());
    args.scales_t = scales_t.data();
    args.sums_t = reinterpret_cast<const int32_t*>(scales_t.data() + q8_0_scales_t_floats(n, n_tokens));
    args.scales_t_stride = q8_0_scales_t_stride(n_tokens);
  }
  fn(args, n_rows, n_tokens);
  return y;
}

// Sets the largest magnitudes in every block (Q8_0 bytes to -128..-1, nibbles and high
// bits mostly set), with the scales finite again.
inline void make_extreme(DType type, std::vector<uint8_t>& w) {
  const TypeTraits& traits = type_traits(type);
  for (auto& byte : w) byte |= type == DType::Q8_0 ? 0x80 : 0xee;
  for (size_t b = 0; b < w.size() / traits.type_size; ++b) {
    uint8_t* blk = w.data() + b * traits.type_size;
    const uint16_t d = fp32_to_fp16(0.01f);
    std::memcpy(blk + (type == DType::Q6_K ? offsetof(BlockQ6_K, d) : 0), &d, 2);
    if (type == DType::Q4_K || type == DType::Q5_K || type == DType::Q4_1 || type == DType::Q5_1)
      std::memcpy(blk + 2, &d, 2);  // dmin, m
  }
}

}  // namespace ridge::kernels::testing
