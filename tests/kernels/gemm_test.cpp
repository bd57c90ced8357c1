// The quantized GEMM pieces: activation quantizers (AVX2 byte-identical to scalar, error
// within half a step), each scalar vec_dot against a double dot of the dequantized
// weights and activations, and each AVX2 tile against the scalar reference on weight
// blocks of random bytes (every bit pattern of scales, nibbles and high bits) with odd
// numbers of rows and tokens.
#include "kernels/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "gemm_test_util.h"
#include "test_util.h"

namespace ridge::kernels {
namespace {

using testing::random_floats;
using testing::random_weight_bytes;
using testing::run_gemm;

struct TypeCase {
  DType type;
  float (*scalar_dot)(int64_t, const uint8_t*, const uint8_t*);
};

const TypeCase kCases[] = {
    {DType::Q8_0, vec_dot_q8_0_scalar}, {DType::Q4_0, vec_dot_q4_0_scalar}, {DType::Q5_0, vec_dot_q5_0_scalar},
    {DType::Q4_K, vec_dot_q4_k_scalar}, {DType::Q5_K, vec_dot_q5_k_scalar}, {DType::Q6_K, vec_dot_q6_k_scalar},
    {DType::F16, vec_dot_f16_scalar},   {DType::BF16, vec_dot_bf16_scalar},
};

// The activation row as floats: what the quantized bytes stand for.
std::vector<float> dequantized_activations(ActFormat format, const uint8_t* act, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  if (format == ActFormat::kF32) {
    std::memcpy(out.data(), act, n * sizeof(float));
  } else if (format == ActFormat::kQ8_0) {
    const auto* q = reinterpret_cast<const int8_t*>(act);
    const auto* d = reinterpret_cast<const float*>(act + n);
    for (int64_t i = 0; i < n; ++i) out[i] = d[i / 32] * q[i];
  } else {
    dequantize_row_q8_k(act, out.data(), n);
  }
  return out;
}

int64_t width_for(DType type) { return type_traits(type).block_size == 1 ? 203 : (type_traits(type).block_size == 32 ? 9 * 32 : 3 * 256); }

TEST(ActivationQuantization, Avx2BytesEqualScalarAndErrorIsHalfAStep) {
  if (best_isa() != Isa::kAvx2) GTEST_SKIP() << "no AVX2 on this CPU";
  const int64_t n = 3 * 256;
  auto x = random_floats(n, 3, 2.0f);
  for (int i = 0; i < 32; ++i) x[32 + i] = 0.0f;                   // an all-zero block
  x[100] = 1e6f;                                                     // one huge value
  for (int i = 0; i < 32; ++i) x[256 + i] = (i % 2 ? 0.5f : -0.5f) * 127 / 127;  // ties
  for (ActFormat format : {ActFormat::kQ8_0, ActFormat::kQ8_K}) {
    const size_t bytes = act_row_bytes(format, n);
    std::vector<uint8_t> slow(bytes, 0), fast(bytes, 0);
    quantize_activations(format, Isa::kScalar, x.data(), slow.data(), n);
    quantize_activations(format, Isa::kAvx2, x.data(), fast.data(), n);
    ASSERT_EQ(slow, fast) << (format == ActFormat::kQ8_0 ? "q8_0" : "q8_k");
    const auto back = dequantized_activations(format, slow.data(), n);
    const int64_t group = format == ActFormat::kQ8_0 ? 32 : 256;
    for (int64_t g0 = 0; g0 < n; g0 += group) {
      float amax = 0;
      for (int64_t i = g0; i < g0 + group; ++i) amax = std::max(amax, std::fabs(x[i]));
      for (int64_t i = g0; i < g0 + group; ++i)
        ASSERT_LE(std::fabs(back[i] - x[i]), amax / 127 * 0.5001f + 1e-30f) << "element " << i;
    }
    if (format == ActFormat::kQ8_K) {
      const auto* blocks = reinterpret_cast<const BlockQ8_K*>(slow.data());
      for (int b = 0; b < 3; ++b)
        for (int g = 0; g < 16; ++g) {
          int sum = 0;
          for (int l = 0; l < 16; ++l) sum += blocks[b].qs[16 * g + l];
          ASSERT_EQ(blocks[b].bsums[g], sum);
        }
    }
  }
}

class GemmByType : public ::testing::TestWithParam<TypeCase> {};

// Scalar reference = double dot of what the weight and activation bytes stand for.
TEST_P(GemmByType, ScalarDotEqualsDequantizedDot) {
  const TypeCase c = GetParam();
  const int64_t n = width_for(c.type);
  const auto w = random_weight_bytes(c.type, n, 5, 11);
  const GemmKernel* kernel = gemm_kernel(c.type, Isa::kScalar);
  ASSERT_NE(kernel, nullptr);
  const auto x = random_floats(n, 12);
  std::vector<uint8_t> act(act_row_bytes(kernel->act, n));
  quantize_activations(kernel->act, Isa::kScalar, x.data(), act.data(), n);
  const auto xa = dequantized_activations(kernel->act, act.data(), n);
  std::vector<float> wf(n);
  for (int r = 0; r < 5; ++r) {
    const uint8_t* row = w.data() + r * row_size(c.type, n);
    dequantize_row(c.type, row, wf.data(), n);
    double want = 0, magnitude = 0;
    for (int64_t i = 0; i < n; ++i) {
      want += double(wf[i]) * xa[i];
      magnitude += std::fabs(double(wf[i]) * xa[i]);
    }
    EXPECT_NEAR(c.scalar_dot(n, row, act.data()), want, 1e-5 * magnitude + 1e-6) << dtype_name(c.type) << " row " << r;
  }
}

TEST_P(GemmByType, Avx2TilesMatchScalarOnRandomBlocks) {
  const TypeCase c = GetParam();
  if (best_isa() != Isa::kAvx2) GTEST_SKIP() << "no AVX2 on this CPU";
  const int64_t n = width_for(c.type);
  for (int64_t n_rows : {1, 3, 7, 37}) {
    for (int64_t n_tokens : {1, 2, 3, 5, 9, 17}) {
      const auto w = random_weight_bytes(c.type, n, n_rows, static_cast<uint32_t>(n_rows * 31 + n_tokens));
      const GemmKernel* fast = gemm_kernel(c.type, Isa::kAvx2);
      const GemmKernel* slow = gemm_kernel(c.type, Isa::kScalar);
      const size_t stride = act_row_bytes(fast->act, n);
      const auto x = random_floats(static_cast<size_t>(n * n_tokens), 40 + static_cast<uint32_t>(n_tokens), 4.0f);
      std::vector<uint8_t> act(stride * n_tokens);
      for (int64_t t = 0; t < n_tokens; ++t)
        quantize_activations(fast->act, Isa::kScalar, x.data() + t * n, act.data() + t * stride, n);
      const int64_t ldy = n_rows + 3;  // a stride wider than the tile
      std::vector<float> got(ldy * n_tokens, -7.0f), want(ldy * n_tokens, -7.0f);
      GemmArgs fast_args{n, w.data(), row_size(c.type, n), act.data(), stride, got.data(), ldy};
      std::vector<float> scales_t;
      if (fast->act == ActFormat::kQ8_0 && n_tokens > 1) {  // the batch path of the Q8_0 family
        scales_t.resize(2 * q8_0_scales_t_floats(n, n_tokens));  // scales, then block sums
        transpose_q8_0_scales(act.data(), stride, n, n_tokens, scales_t.data());
        fast_args.scales_t = scales_t.data();
        fast_args.sums_t = reinterpret_cast<const int32_t*>(scales_t.data() + q8_0_scales_t_floats(n, n_tokens));
        fast_args.scales_t_stride = q8_0_scales_t_stride(n_tokens);
      }
      GemmArgs slow_args = fast_args;
      slow_args.y = want.data();
      fast->gemm(fast_args, n_rows, n_tokens);
      slow->gemm(slow_args, n_rows, n_tokens);
      // Float reordering and int -> float rounding of partial sums (K-quant sums pass 2^24)
      // scale with the outputs' magnitude.
      float scale = 0;
      for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t r = 0; r < n_rows; ++r) scale = std::max(scale, std::fabs(want[t * ldy + r]));
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t r = 0; r < n_rows; ++r) {
          const float ref = want[t * ldy + r];
          ASSERT_NEAR(got[t * ldy + r], ref, 2e-5 * std::fabs(ref) + 2e-5 * scale + 1e-4)
              << dtype_name(c.type) << " rows " << n_rows << " tokens " << n_tokens << " at " << t << "," << r;
        }
        for (int64_t r = n_rows; r < ldy; ++r) ASSERT_EQ(got[t * ldy + r], -7.0f) << "wrote outside the tile";
      }
    }
  }
}

// The AVX-VNNI K-quant tiles (vpdpwssd in place of madd + add) must give the AVX2 tiles
// bits exactly, decode and batches, on random blocks and on the largest magnitudes.
TEST(GemmKQuant, AvxVnniTilesEqualAvx2TilesExactly) {
  if (best_isa() != Isa::kAvx2 || !cpu_has_avx_vnni()) GTEST_SKIP() << "no AVX-VNNI on this CPU";
  struct Pair {
    DType type;
    GemmFn avx2, vnni;
  };
  const Pair pairs[] = {{DType::Q4_K, gemm_q4_k_avx2, gemm_q4_k_avxvnni},
                        {DType::Q5_K, gemm_q5_k_avx2, gemm_q5_k_avxvnni},
                        {DType::Q6_K, gemm_q6_k_avx2, gemm_q6_k_avxvnni}};
  for (const Pair& p : pairs) {
    const int64_t n = width_for(p.type), n_rows = 5;
    for (bool extreme : {false, true}) {
      for (int64_t n_tokens : {1, 6, 9}) {
        auto w = random_weight_bytes(p.type, n, n_rows, static_cast<uint32_t>(500 + n_tokens));
        if (extreme) {
          for (auto& byte : w) byte |= 0xee;  // mostly high nibbles, high bits and big scales
          for (int64_t b = 0; b < n_rows * n / kQK_K; ++b) {  // finite f16 scales again
            uint8_t* blk = w.data() + b * type_traits(p.type).type_size;
            const uint16_t d = fp32_to_fp16(0.01f);
            std::memcpy(blk + (p.type == DType::Q6_K ? offsetof(BlockQ6_K, d) : 0), &d, 2);
            if (p.type != DType::Q6_K) std::memcpy(blk + 2, &d, 2);  // dmin
          }
        }
        const size_t stride = act_row_bytes(ActFormat::kQ8_K, n);
        auto x = random_floats(static_cast<size_t>(n * n_tokens), 7 + static_cast<uint32_t>(n_tokens), 4.0f);
        if (extreme)
          for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0) ? -1.0f : 1.0f;
        std::vector<uint8_t> act(stride * n_tokens);
        for (int64_t t = 0; t < n_tokens; ++t)
          quantize_activations(ActFormat::kQ8_K, Isa::kScalar, x.data() + t * n, act.data() + t * stride, n);
        std::vector<float> got(n_rows * n_tokens, -7.0f), want(n_rows * n_tokens, -5.0f);
        GemmArgs args{n, w.data(), row_size(p.type, n), act.data(), stride, want.data(), n_rows};
        p.avx2(args, n_rows, n_tokens);
        args.y = got.data();
        p.vnni(args, n_rows, n_tokens);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i], want[i]) << dtype_name(p.type) << " tokens " << n_tokens << " extreme " << extreme << " at "
                                     << i;
      }
    }
  }
}

// The AVX-512 VNNI kernels (row-major tiles below 4 tokens, packed 16-row panels from
// 4) compute the scalar reference's exact sequence: equal bits, for row counts that do
// not fill a tile or panel, token counts on both sides of the panel threshold, random
// blocks and the largest magnitudes.
TEST(GemmAvx512, EqualsScalarReferenceBitForBit) {
  if (best_isa() != Isa::kAvx2 || !cpu_has_avx512_vnni()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  struct Case {
    DType type;
    GemmFn fn;
  };
  const Case cases[] = {{DType::Q8_0, gemm_q8_0_avx512}, {DType::Q4_0, gemm_q4_0_avx512},
                        {DType::Q5_0, gemm_q5_0_avx512}, {DType::Q4_K, gemm_q4_k_avx512},
                        {DType::Q5_K, gemm_q5_k_avx512}, {DType::Q6_K, gemm_q6_k_avx512}};
  for (const Case& c : cases) {
    // Rows of one block (first block is the last) and of several.
    for (const int64_t n : {static_cast<int64_t>(type_traits(c.type).block_size), width_for(c.type)}) {
      const GemmKernel* slow = gemm_kernel(c.type, Isa::kScalar);
      const size_t stride = act_row_bytes(slow->act, n);
      for (bool extreme : {false, true}) {
        for (int64_t n_rows : {1, 7, 16, 23}) {
          for (int64_t n_tokens : {1, 2, 3, 4, 5, 7, 8, 9, 18}) {  // tiles, blockwise packing, panels
            auto w = random_weight_bytes(c.type, n, n_rows, static_cast<uint32_t>(n_rows * 131 + n_tokens));
            if (extreme) testing::make_extreme(c.type, w);
            auto x = random_floats(static_cast<size_t>(n * n_tokens), 70 + static_cast<uint32_t>(n_tokens), 4.0f);
            if (extreme)
              for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0) ? -1.0f : 1.0f;  // every q at +-127
            std::vector<uint8_t> act(stride * n_tokens);
            for (int64_t t = 0; t < n_tokens; ++t)
              quantize_activations(slow->act, Isa::kScalar, x.data() + t * n, act.data() + t * stride, n);
            const int64_t ldy = n_rows + 3;
            const auto want =
                run_gemm(slow->gemm, slow->act, w, row_size(c.type, n), act, stride, n, n_rows, n_tokens, ldy);
            const auto got = run_gemm(c.fn, slow->act, w, row_size(c.type, n), act, stride, n, n_rows, n_tokens, ldy);
            for (size_t i = 0; i < got.size(); ++i)
              ASSERT_EQ(got[i], want[i]) << dtype_name(c.type) << " width " << n << " rows " << n_rows << " tokens "
                                         << n_tokens << " extreme " << extreme << " at " << i;
          }
        }
      }
    }
  }
}

// The AVX2 and AVX-VNNI (256-bit) kernels, which other CPUs run: within float
// reordering of the scalar reference.
TEST(GemmAvx2, Avx2AndAvxVnniKernelsMatchScalar) {
  if (best_isa() != Isa::kAvx2) GTEST_SKIP() << "no AVX2 on this CPU";
  struct Case {
    DType type;
    GemmFn fn;
    bool needs_vnni;
  };
  const Case cases[] = {
      {DType::Q8_0, gemm_q8_0_avx2, false},    {DType::Q4_0, gemm_q4_0_avx2, false},
      {DType::Q5_0, gemm_q5_0_avx2, false},    {DType::Q4_K, gemm_q4_k_avx2, false},
      {DType::Q5_K, gemm_q5_k_avx2, false},    {DType::Q6_K, gemm_q6_k_avx2, false},
      {DType::Q8_0, gemm_q8_0_avxvnni, true},  {DType::Q4_0, gemm_q4_0_avxvnni, true},
      {DType::Q5_0, gemm_q5_0_avxvnni, true},  {DType::Q4_K, gemm_q4_k_avxvnni, true},
      {DType::Q5_K, gemm_q5_k_avxvnni, true},  {DType::Q6_K, gemm_q6_k_avxvnni, true},
  };
  for (const Case& c : cases) {
    if (c.needs_vnni && !cpu_has_avx_vnni()) continue;
    const int64_t n = width_for(c.type);
    const GemmKernel* slow = gemm_kernel(c.type, Isa::kScalar);
    const size_t stride = act_row_bytes(slow->act, n);
    for (int64_t n_rows : {1, 7, 37}) {
      for (int64_t n_tokens : {1, 3, 9, 17}) {
        const auto w = random_weight_bytes(c.type, n, n_rows, static_cast<uint32_t>(n_rows * 7 + n_tokens));
        const auto x = random_floats(static_cast<size_t>(n * n_tokens), 90 + static_cast<uint32_t>(n_tokens), 4.0f);
        std::vector<uint8_t> act(stride * n_tokens);
        for (int64_t t = 0; t < n_tokens; ++t)
          quantize_activations(slow->act, Isa::kScalar, x.data() + t * n, act.data() + t * stride, n);
        const int64_t ldy = n_rows + 3;
        const auto want = run_gemm(slow->gemm, slow->act, w, row_size(c.type, n), act, stride, n, n_rows, n_tokens, ldy);
        const auto got = run_gemm(c.fn, slow->act, w, row_size(c.type, n), act, stride, n, n_rows, n_tokens, ldy);
        float scale = 0;
        for (float v : want) scale = std::max(scale, std::fabs(v));
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t r = 0; r < n_rows; ++r) {
            const float ref = want[t * ldy + r];
            ASSERT_NEAR(got[t * ldy + r], ref, 2e-5 * std::fabs(ref) + 2e-5 * scale + 1e-4)
                << dtype_name(c.type) << (c.needs_vnni ? " avx-vnni" : " avx2") << " rows " << n_rows << " tokens "
                << n_tokens;
          }
          for (int64_t r = n_rows; r < ldy; ++r) ASSERT_EQ(got[t * ldy + r], -7.0f) << "wrote outside the tile";
        }
      }
    }
  }
}

// The largest magnitudes the formats allow: maddubs must not saturate.
TEST_P(GemmByType, ExtremeValuesDoNotSaturate) {
  const TypeCase c = GetParam();
  if (best_isa() != Isa::kAvx2) GTEST_SKIP() << "no AVX2 on this CPU";
  const int64_t n = width_for(c.type);
  auto w = random_weight_bytes(c.type, n, 2, 99);
  if (c.type == DType::Q8_0) {
    for (int64_t b = 0; b < 2 * n / 32; ++b) std::memset(w.data() + b * 34 + 2, 0x80, 32);  // all -128
  } else if (c.type != DType::F16 && c.type != DType::BF16) {
    for (size_t i = 0; i < w.size(); ++i) w[i] |= 0xee;  // mostly high nibbles and bits
    for (int64_t b = 0; b < 2 * n / type_traits(c.type).block_size; ++b) {
      uint8_t* blk = w.data() + b * type_traits(c.type).type_size;
      const uint16_t d = fp32_to_fp16(0.01f);
      const size_t d_offset = c.type == DType::Q6_K ? offsetof(BlockQ6_K, d) : 0;
      std::memcpy(blk + d_offset, &d, 2);
      if (c.type == DType::Q4_K || c.type == DType::Q5_K) std::memcpy(blk + 2, &d, 2);  // dmin
    }
  }
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = (i % 3 == 0) ? -1.0f : 1.0f;  // every q at +-127
  const GemmKernel* fast = gemm_kernel(c.type, Isa::kAvx2);
  std::vector<uint8_t> act(act_row_bytes(fast->act, n));
  quantize_activations(fast->act, Isa::kScalar, x.data(), act.data(), n);
  for (int r = 0; r < 2; ++r) {
    const uint8_t* row = w.data() + r * row_size(c.type, n);
    float got = 0;
    fast->gemm({n, row, row_size(c.type, n), act.data(), act.size(), &got, 1}, 1, 1);
    const float want = c.scalar_dot(n, row, act.data());
    EXPECT_NEAR(got, want, 2e-5 * std::fabs(want) + 1e-3) << dtype_name(c.type) << " row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(WeightTypes, GemmByType, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(dtype_name(info.param.type)); });

}  // namespace
}  // namespace ridge::kernels
