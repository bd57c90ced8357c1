// matmul against the double reference on the same dequantized weights, for each weight
// type the engine meets in real GGUF files, with a tolerance that accounts for the 8-bit
// rounding of the activations; plus the batching guarantees the engine relies on: a
// token's output does not depend on the batch, the thread count or the tile it lands in.
#include "kernels/gemm/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "kernels/gemm/table.h"
#include "kernels/ops/ops.h"
#include "test_util.h"

namespace ridge::kernels {
namespace {

using testing::random_floats;

// A random n_out x n_in matrix quantized to `type`, rows padded to row_bytes.
struct QuantizedMatrix {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

// Types ridge reads but cannot quantize to: where in a block the scale sits and the
// largest code it multiplies, so random blocks get random codes under a scale that keeps
// weights within about +-1, as real ones are (random scale bits could be inf or NaN).
enum class ScaleField {
  kF16,         // an f16 at `offset`
  kIq1mNibbles, // IQ1_M: an f16 in the top nibbles of four uint16 from `offset`
  kUe4m3,       // NVFP4: four unsigned E4M3 bytes from `offset`, finite whatever the bits
};
struct RandomBlockScale {
  DType type;
  size_t offset;    // of the scale
  float max_code;   // the largest |code| it multiplies (its group scale included)
  ScaleField field = ScaleField::kF16;
};
constexpr RandomBlockScale kRandomBlockScales[] = {
    {DType::IQ4_NL, 0, 127.0f},
    {DType::IQ4_XS, 0, 32.0f * 127.0f},
    {DType::IQ2_XXS, 0, 15.5f / 4 * 43},  // (0.5 + s) / 4 times grid values up to 43
    {DType::IQ2_XS, 0, 15.5f / 4 * 43},
    {DType::IQ2_S, 0, 15.5f / 4 * 43},
    {DType::IQ3_XXS, 0, 15.5f / 2 * 62},
    {DType::IQ3_S, 0, 31.0f * 15},        // (1 + 2s) times grid values up to 15
    {DType::IQ1_S, 0, 15.0f * 1.125f},    // (2s + 1) times grid +- delta
    {DType::IQ1_M, 48, 15.0f * 1.125f, ScaleField::kIq1mNibbles},
    {DType::NVFP4, 0, 12.0f, ScaleField::kUe4m3},
};

const RandomBlockScale* random_block_scale(DType type) {
  for (const RandomBlockScale& s : kRandomBlockScales)
    if (s.type == type) return &s;
  return nullptr;
}

// One row of random blocks of a type without a quantizer.
void random_blocks(DType type, uint8_t* row, int64_t n_in, uint32_t seed) {
  const RandomBlockScale* scale = random_block_scale(type);
  const TypeTraits& traits = type_traits(type);
  std::mt19937 rng(seed);
  const size_t bytes = row_size(type, n_in);
  for (size_t i = 0; i < bytes; ++i) row[i] = static_cast<uint8_t>(rng());
  for (size_t b = 0; b < bytes / traits.type_size; ++b) {
    uint8_t* at = row + b * traits.type_size + scale->offset;
    if (scale->field == ScaleField::kUe4m3) {
      for (int s = 0; s < 4; ++s) at[s] = static_cast<uint8_t>(0x20 + rng() % 0x10);  // 2^-3 up to 2^-1, halved
      continue;
    }
    const float magnitude = (0.2f + 0.8f * static_cast<float>(rng() % 1000) / 1000.0f) / scale->max_code;
    const uint16_t h = fp32_to_fp16(rng() % 2 ? magnitude : -magnitude);
    if (scale->field == ScaleField::kF16) {
      std::memcpy(at, &h, sizeof h);
      continue;
    }
    for (int k = 0; k < 4; ++k) {  // kIq1mNibbles: nibble k of h on top of word k
      uint16_t word;
      std::memcpy(&word, at + 2 * k, sizeof word);
      word = static_cast<uint16_t>((word & 0x0fff) | (((h >> (4 * k)) & 0xf) << 12));
      std::memcpy(at + 2 * k, &word, sizeof word);
    }
  }
}

QuantizedMatrix make_matrix(DType type, int64_t n_in, int64_t n_out, size_t padding = 0, uint32_t seed = 17) {
  const TypeTraits& traits = type_traits(type);
  const auto values = random_floats(static_cast<size_t>(n_in * n_out), seed);
  QuantizedMatrix m;
  const size_t row_bytes = row_size(type, n_in) + padding;
  m.bytes.assign(row_bytes * static_cast<size_t>(n_out), 0xAB);
  for (int64_t o = 0; o < n_out; ++o) {
    if (type == DType::F32)
      std::memcpy(m.bytes.data() + o * row_bytes, values.data() + o * n_in, n_in * sizeof(float));
    else if (traits.from_float == nullptr)
      random_blocks(type, m.bytes.data() + o * row_bytes, n_in, seed * 7919u + static_cast<uint32_t>(o));
    else
      traits.from_float(values.data() + o * n_in, m.bytes.data() + o * row_bytes, n_in);
  }
  m.w = WeightMatrix{type, n_in, n_out, m.bytes.data(), row_bytes};
  return m;
}

bool can_test(DType type) {
  const TypeTraits& t = type_traits(type);
  return type == DType::F32 || (t.to_float != nullptr && (t.from_float != nullptr || random_block_scale(type)));
}

// n_in for a type: a few blocks, odd where the block size allows it.
int64_t odd_width(DType type) {
  const int64_t block = type_traits(type).block_size;
  return block == 1 ? 131 : (block == 32 ? 19 * block : 3 * block);  // 19: past one group of 8
}

// Elements that share one activation scale for this weight type (0: f32 activations).
int64_t activation_group(DType type) {
  const GemmKernel* k = gemm_kernel(type, Isa::kScalar);
  if (k == nullptr || k->act == ActFormat::kF32) return 0;
  return k->act == ActFormat::kQ8_0 ? 32 : 256;
}

std::vector<Isa> isas() { return testing::supported_isas(); }

void reserve(Scratch& scratch, int n_threads, const WeightMatrix& w, int64_t max_tokens) {
  scratch.reserve(n_threads, matmul_scratch_floats(w));
  scratch.reserve_shared(matmul_shared_bytes(w, max_tokens));
}

class MatmulByType : public ::testing::TestWithParam<DType> {};

// |got - ref| <= float slack + sum_i |w_i| * step_i / 2, where step_i = max|x| / 127 of
// x_i's activation block: the most that rounding x to 8 bits can move the dot product.
TEST_P(MatmulByType, MatchesDoubleReferenceWithinActivationRounding) {
  const DType type = GetParam();
  if (!can_test(type)) GTEST_SKIP() << dtype_name(type) << " has no quantizer/dequantizer yet";
  const int64_t n_in = odd_width(type), n_out = 37;
  const QuantizedMatrix m = make_matrix(type, n_in, n_out);
  const int64_t group = activation_group(type);
  std::vector<float> row(static_cast<size_t>(n_in));

  for (Isa isa : isas()) {
    for (int64_t n_tokens : {1, 3, 17}) {
      const auto x = random_floats(static_cast<size_t>(n_tokens * n_in), 5 + n_tokens);
      ThreadPool pool(3);
      Scratch scratch;
      reserve(scratch, pool.n_threads(), m.w, n_tokens);
      std::vector<float> got(static_cast<size_t>(n_tokens * n_out)), want(got.size());
      matmul_isa(m.w, x.data(), got.data(), n_tokens, pool, scratch, isa);
      matmul_reference(m.w, x.data(), want.data(), n_tokens);

      for (int64_t o = 0; o < n_out; ++o) {
        if (type == DType::F32)
          std::memcpy(row.data(), m.bytes.data() + o * m.w.row_bytes, n_in * sizeof(float));
        else
          type_traits(type).to_float(m.bytes.data() + o * m.w.row_bytes, row.data(), n_in);
        for (int64_t t = 0; t < n_tokens; ++t) {
          const float* xt = x.data() + t * n_in;
          double magnitude = 0, rounding = 0;
          for (int64_t i = 0; i < n_in; ++i) magnitude += std::fabs(double(row[i]) * xt[i]);
          for (int64_t g0 = 0; group > 0 && g0 < n_in; g0 += group) {
            double amax = 0, weight = 0;
            for (int64_t i = g0; i < g0 + group; ++i) {
              amax = std::max(amax, double(std::fabs(xt[i])));
              weight += std::fabs(row[i]);
            }
            rounding += weight * amax / 127.0 / 2.0;
          }
          // NF4's integer kernels multiply its code points rounded to 1/127 of the block's
          // absmax (the largest |w| of the dequantized block).
          for (int64_t b0 = 0; type == DType::NF4 && b0 < n_in; b0 += 64) {
            double absmax = 0, x_sum = 0;
            for (int64_t i = b0; i < b0 + 64; ++i) {
              absmax = std::max(absmax, double(std::fabs(row[i])));
              x_sum += std::fabs(xt[i]);
            }
            rounding += x_sum * absmax / 127.0 / 2.0;
          }
          const double ref = want[t * n_out + o];
          EXPECT_NEAR(got[t * n_out + o], ref, 1e-5 + 1e-4 * std::fabs(ref) + 4e-6 * magnitude + 1.001 * rounding)
              << dtype_name(type) << " " << isa_name(isa) << " token " << t << " row " << o;
        }
      }
    }
  }
}

// Each ISA's kernels against the scalar per-type references on the same quantized
// activations: at most float summation order differs, so the gap is tiny.
TEST_P(MatmulByType, EveryIsaMatchesScalarKernel) {
  const DType type = GetParam();
  if (!cpu_supports(Isa::kAvx2)) GTEST_SKIP() << "skipped: no avx2";
  if (!can_test(type)) GTEST_SKIP() << dtype_name(type) << " has no quantizer/dequantizer yet";
  const int64_t n_in = odd_width(type), n_out = 41;
  const QuantizedMatrix m = make_matrix(type, n_in, n_out);
  ThreadPool pool(2);
  Scratch scratch;
  for (Isa isa : isas()) {
    if (isa == Isa::kScalar) continue;
    for (int64_t n_tokens : {1, 2, 5, 23}) {
      reserve(scratch, pool.n_threads(), m.w, n_tokens);
      const auto x = random_floats(static_cast<size_t>(n_tokens * n_in), 31 + n_tokens, 3.0f);
      std::vector<float> fast(static_cast<size_t>(n_tokens * n_out)), slow(fast.size());
      matmul_isa(m.w, x.data(), fast.data(), n_tokens, pool, scratch, isa);
      matmul_isa(m.w, x.data(), slow.data(), n_tokens, pool, scratch, Isa::kScalar);
      for (size_t i = 0; i < fast.size(); ++i)
        EXPECT_NEAR(fast[i], slow[i], 1e-4 + 2e-5 * std::fabs(slow[i]))
            << dtype_name(type) << " " << isa_name(isa) << " output " << i;
    }
  }
}

TEST_P(MatmulByType, TokenResultIndependentOfBatchAndThreads) {
  const DType type = GetParam();
  if (!can_test(type)) GTEST_SKIP() << dtype_name(type) << " has no quantizer/dequantizer yet";
  const int64_t n_in = odd_width(type), n_out = 29, n_tokens = 17;
  const QuantizedMatrix m = make_matrix(type, n_in, n_out);
  const auto x = random_floats(static_cast<size_t>(n_tokens * n_in), 9);
  ThreadPool pool3(3), pool1(1);
  for (Isa isa : isas()) {
    Scratch scratch;
    reserve(scratch, 3, m.w, n_tokens);
    std::vector<float> batched(static_cast<size_t>(n_tokens * n_out));
    matmul_isa(m.w, x.data(), batched.data(), n_tokens, pool3, scratch, isa);
    std::vector<float> single(static_cast<size_t>(n_out));
    for (int64_t t = 0; t < n_tokens; ++t) {
      matmul_isa(m.w, x.data() + t * n_in, single.data(), 1, (t % 2) ? pool1 : pool3, scratch, isa);
      for (int64_t o = 0; o < n_out; ++o)
        ASSERT_EQ(single[o], batched[t * n_out + o]) << isa_name(isa) << " token " << t << " row " << o;
    }
    // A window of the batch in other tile positions: tokens 3..9 alone.
    std::vector<float> window(static_cast<size_t>(7 * n_out));
    matmul_isa(m.w, x.data() + 3 * n_in, window.data(), 7, pool1, scratch, isa);
    for (int64_t i = 0; i < 7 * n_out; ++i) ASSERT_EQ(window[i], batched[3 * n_out + i]) << isa_name(isa);
  }
}

INSTANTIATE_TEST_SUITE_P(WeightTypes, MatmulByType,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0,
                                           DType::Q5_0, DType::Q4_1, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                                           DType::Q2_K, DType::Q3_K, DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4,
                                           DType::TQ1_0, DType::TQ2_0, DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S,
                                           DType::IQ3_XXS, DType::IQ3_S, DType::IQ1_S, DType::IQ1_M, DType::NVFP4,
                                           DType::NF4, DType::I8_ROWS),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Every GGUF type ridge reads either runs (it has a dequantizer, so at least the
// dequantized-rows path) or is refused by check_weight_matrix, the loader's check, with a
// message naming the tensor and the type.
TEST(Matmul, TypesWithoutDequantizationAreRefusedNamingTensorAndType) {
  int refused = 0;
  for (uint32_t id = 0; id < kDTypeCount; ++id) {
    if (!is_known_dtype(id)) continue;
    const DType type = static_cast<DType>(id);
    const TypeTraits& traits = type_traits(type);
    const int64_t n_in = traits.block_size == 1 ? 256 : 2 * traits.block_size;
    std::vector<uint8_t> bytes(row_size(type, n_in) * 3);
    const WeightMatrix w{type, n_in, 3, bytes.data(), row_size(type, n_in)};
    if (type == DType::F32 || traits.to_float != nullptr) {
      EXPECT_NO_THROW(check_weight_matrix(w, "blk.0.attn_q.weight")) << traits.name;
      continue;
    }
    ++refused;
    try {
      check_weight_matrix(w, "blk.0.attn_q.weight");
      ADD_FAILURE() << traits.name << " has no dequantizer but was accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("blk.0.attn_q.weight"), std::string::npos) << message;
      EXPECT_NE(message.find(std::string(traits.name) + " is not supported by ridge yet"), std::string::npos)
          << message;
    }
  }
  EXPECT_GT(refused, 0);  // Q1_0 and the integer types, for now
}

// A type without a kernel of its own runs as the F32 matmul of its rows dequantized by
// to_float: the same floats, bit for bit, as that matmul on a matrix of those rows.
TEST(Matmul, TypesWithoutKernelsRunAsF32MatmulOfTheirDequantizedRows) {
  for (DType type : {DType::Q2_K, DType::Q3_K, DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4, DType::TQ1_0, DType::TQ2_0,
                     DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S, DType::IQ1_S,
                     DType::IQ1_M, DType::NVFP4}) {
    ASSERT_EQ(gemm_kernel(type, Isa::kScalar), nullptr) << dtype_name(type);
    const int64_t n_in = odd_width(type), n_out = 21;
    const QuantizedMatrix m = make_matrix(type, n_in, n_out);
    std::vector<float> rows(static_cast<size_t>(n_in * n_out));
    for (int64_t o = 0; o < n_out; ++o)
      dequantize_row(type, m.bytes.data() + o * m.w.row_bytes, rows.data() + o * n_in, n_in);
    const WeightMatrix f32{DType::F32, n_in, n_out, reinterpret_cast<const uint8_t*>(rows.data()),
                           static_cast<size_t>(n_in) * sizeof(float)};
    for (Isa isa : isas()) {
      for (int64_t n_tokens : {1, 4, 13}) {
        const auto x = random_floats(static_cast<size_t>(n_tokens * n_in), 41 + n_tokens);
        ThreadPool pool(2);
        Scratch scratch;
        reserve(scratch, pool.n_threads(), m.w, n_tokens);
        reserve(scratch, pool.n_threads(), f32, n_tokens);
        std::vector<float> got(static_cast<size_t>(n_tokens * n_out)), want(got.size());
        matmul_isa(m.w, x.data(), got.data(), n_tokens, pool, scratch, isa);
        matmul_isa(f32, x.data(), want.data(), n_tokens, pool, scratch, isa);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i], want[i]) << dtype_name(type) << " " << isa_name(isa) << " output " << i;
      }
    }
  }
}

// The float mode: dequantized rows, f32 activations: as close to the double reference as
// float accumulation allows, for every type, then back to the quantized default.
TEST(Matmul, FloatModeMatchesDoubleReference) {
  for (DType type : {DType::Q8_0, DType::Q5_0, DType::Q4_K, DType::Q6_K, DType::F16}) {
    const int64_t n_in = odd_width(type), n_out = 23, n_tokens = 5;
    const QuantizedMatrix m = make_matrix(type, n_in, n_out);
    const auto x = random_floats(static_cast<size_t>(n_tokens * n_in), 8);
    ThreadPool pool(2);
    Scratch scratch;
    reserve(scratch, 2, m.w, n_tokens);
    std::vector<float> got(n_tokens * n_out), quantized(got.size()), want(got.size());
    set_matmul_mode(MatmulMode::kFloat);
    matmul(m.w, x.data(), got.data(), n_tokens, pool, scratch);
    set_matmul_mode(MatmulMode::kQuantized);
    matmul(m.w, x.data(), quantized.data(), n_tokens, pool, scratch);
    matmul_reference(m.w, x.data(), want.data(), n_tokens);
    double float_err = 0, quantized_err = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 2e-4 + 1e-5 * std::fabs(want[i])) << dtype_name(type) << " output " << i;
      float_err = std::max(float_err, std::fabs(double(got[i]) - want[i]));
      quantized_err = std::max(quantized_err, std::fabs(double(quantized[i]) - want[i]));
    }
    if (type != DType::F16) {
      EXPECT_LT(float_err, quantized_err) << dtype_name(type);  // 8-bit activations cost accuracy
    }
  }
  EXPECT_EQ(matmul_mode(), MatmulMode::kQuantized);
}

TEST(Matmul, PaddedRowStrideIsHonoured) {
  for (DType type : {DType::F32, DType::Q8_0, DType::Q4_K}) {
    const QuantizedMatrix padded = make_matrix(type, 256, 9, /*padding=*/12);
    const QuantizedMatrix dense = make_matrix(type, 256, 9);
    const auto x = random_floats(2 * 256, 3);
    ThreadPool pool(2);
    Scratch scratch;
    reserve(scratch, 2, padded.w, 2);
    std::vector<float> got(2 * 9), want(2 * 9);
    matmul(padded.w, x.data(), got.data(), 2, pool, scratch);
    matmul(dense.w, x.data(), want.data(), 2, pool, scratch);
    EXPECT_EQ(got, want) << dtype_name(type);
  }
}

// Q/K/V and gate/up run as one group: each output must be bit for bit what its own
// matmul gives, for one and several tokens, any thread count, matrices of one type or
// mixed, and groups that must fall back to one matmul each (different activations).
TEST(Matmul, GroupEqualsSeparateMatmuls) {
  const std::vector<std::vector<DType>> groups = {
      {DType::Q4_K, DType::Q4_K, DType::Q6_K},  // Q4_K_M attention: one Q8_K activation
      {DType::Q5_0, DType::Q5_0, DType::Q8_0},  // Qwen 0.5B: one Q8_0 activation
      {DType::Q4_K, DType::Q8_0},               // different activations: one by one
      {DType::F32, DType::Q8_0, DType::F16},    // float paths among them
  };
  const int64_t n_in = 512;
  for (const auto& types : groups) {
    std::vector<QuantizedMatrix> ms;
    for (size_t i = 0; i < types.size(); ++i)
      ms.push_back(make_matrix(types[i], n_in, 23 + 40 * static_cast<int64_t>(i), 0, 100 + static_cast<uint32_t>(i)));
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      for (int64_t n_tokens : {1, 5, 20}) {
        Scratch scratch;
        for (const auto& m : ms) {
          scratch.reserve(threads, matmul_scratch_floats(m.w));
          scratch.reserve_shared(matmul_shared_bytes(m.w, n_tokens));
        }
        const auto x = random_floats(static_cast<size_t>(n_tokens * n_in), 7);
        std::vector<std::vector<float>> got(ms.size()), want(ms.size());
        std::vector<const WeightMatrix*> ws;
        std::vector<float*> ys;
        for (size_t i = 0; i < ms.size(); ++i) {
          got[i].assign(static_cast<size_t>(n_tokens * ms[i].w.n_out), -1.0f);
          want[i].resize(got[i].size());
          matmul(ms[i].w, x.data(), want[i].data(), n_tokens, pool, scratch);
          ws.push_back(&ms[i].w);
          ys.push_back(got[i].data());
        }
        matmul_group(ws, x.data(), ys, n_tokens, pool, scratch);
        for (size_t i = 0; i < ms.size(); ++i)
          EXPECT_EQ(got[i], want[i]) << "matrix " << i << " (" << dtype_name(types[i]) << ") threads " << threads
                                     << " tokens " << n_tokens;
      }
    }
  }
}

// The down projection of a gated FFN, fused or not, gives what forming the activation
// and then multiplying gives, bit for bit: the quantized paths (one Q8_0 and one Q8_K
// activation type, 37 tokens: on AMX two tiles and a remainder), the float paths and
// LLM.int8 with outlier columns, which fall back to the two steps; SwiGLU and GeGLU.
TEST(Matmul, GluEqualsActivationThenMatmul) {
  const DType types[] = {DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16, DType::F32, DType::I8_ROWS};
  for (DType type : types) {
    const int64_t n_in = type == DType::Q8_0 || type == DType::I8_ROWS ? 19 * 32 : 3 * 256;
    const QuantizedMatrix m = make_matrix(type, n_in, 45);
    for (GluFn glu : {GluFn{swiglu}, GluFn{geglu}}) {
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        for (int64_t n_tokens : {1, 37}) {
          Scratch scratch;
          reserve(scratch, threads, m.w, n_tokens);
          auto gate = random_floats(static_cast<size_t>(n_tokens * n_in), 3, 4.0f);
          const auto up = random_floats(gate.size(), 4, 4.0f);
          if (type == DType::I8_ROWS) gate[5] = 40.0f;  // an outlier column after gating
          std::vector<float> act(gate.size()), want(static_cast<size_t>(n_tokens * m.w.n_out));
          glu(gate.data(), up.data(), act.data(), static_cast<int64_t>(act.size()));
          matmul(m.w, act.data(), want.data(), n_tokens, pool, scratch);
          std::vector<float> got(want.size(), -1.0f);
          matmul_glu(m.w, glu, gate.data(), up.data(), got.data(), n_tokens, pool, scratch);
          EXPECT_EQ(got, want) << dtype_name(type) << " " << (glu == GluFn{swiglu} ? "swiglu" : "geglu") << " threads "
                               << threads << " tokens " << n_tokens;
        }
      }
    }
  }
}

TEST(Matmul, GroupRejectsMismatchedShapes) {
  const QuantizedMatrix a = make_matrix(DType::Q8_0, 256, 4), b = make_matrix(DType::Q8_0, 512, 4);
  ThreadPool pool(2);
  Scratch scratch(2, matmul_scratch_floats(b.w));
  scratch.reserve_shared(matmul_shared_bytes(b.w, 1));
  std::vector<float> x(512), ya(4), yb(4);
  const WeightMatrix* ws[] = {&a.w, &b.w};
  float* ys[] = {ya.data(), yb.data()};
  EXPECT_THROW(matmul_group(ws, x.data(), ys, 1, pool, scratch), Error);  // n_in differs
  float* one[] = {ya.data()};
  EXPECT_THROW(matmul_group(ws, x.data(), one, 1, pool, scratch), Error);  // 2 matrices, 1 output
}

TEST(Matmul, RejectsUnusableWeightsAndSmallScratch) {
  std::vector<uint8_t> bytes(4096);
  ThreadPool pool(2);
  Scratch scratch(2, 1);
  float x[512] = {}, y[4] = {};
  // Q8_0 rows need a multiple of 32 columns.
  EXPECT_THROW(weight_matrix(DType::Q8_0, 33, 2, bytes.data()), Error);
  // Row stride shorter than a row.
  EXPECT_THROW(check_weight_matrix(WeightMatrix{DType::F32, 8, 2, bytes.data(), 16}, "w"), Error);
  // An id that is not a type at all.
  EXPECT_THROW(check_weight_matrix(WeightMatrix{static_cast<DType>(4), 32, 2, bytes.data(), 64}, "w"), Error);
  EXPECT_THROW(check_weight_matrix(WeightMatrix{DType::F32, 8, 2, nullptr, 32}, "w"), Error);
  // Quantized activations need shared scratch, and every non-F32 type per-thread rows
  // (for types without an integer kernel, and for MatmulMode::kFloat).
  const WeightMatrix q8 = weight_matrix(DType::Q8_0, 256, 2, bytes.data());
  scratch.reserve(2, matmul_scratch_floats(q8));
  EXPECT_THROW(matmul(q8, x, y, 1, pool, scratch), Error);
  scratch.reserve_shared(matmul_shared_bytes(q8, 1));
  EXPECT_NO_THROW(matmul(q8, x, y, 1, pool, scratch));
  EXPECT_THROW(matmul(q8, x, y, 2, pool, scratch), Error);  // sized for one token
  const WeightMatrix q4_1 = weight_matrix(DType::Q4_1, 512, 2, bytes.data());
  EXPECT_THROW(matmul(q4_1, x, y, 1, pool, scratch), Error);  // needs 16 * 512 floats per thread
  try {
    check_weight_matrix(WeightMatrix{DType::F32, 8, 2, bytes.data(), 16}, "blk.3.ffn_up.weight");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.3.ffn_up.weight"), std::string::npos) << e.what();
  }
}

// LLM.int8: activation columns above the outlier threshold are multiplied in f32
// against the dequantized weights instead of flattening their int8 block, so planted
// outliers cost (almost) nothing; without the decomposition they cost a lot.
TEST(MatmulInt8, OutlierColumnsKeepTheirPrecision) {
  const int64_t n_in = 256, n_out = 40, n_tokens = 5;
  const QuantizedMatrix m = make_matrix(DType::I8_ROWS, n_in, n_out);
  auto x = random_floats(static_cast<size_t>(n_tokens * n_in), 11);
  for (int64_t t = 0; t < n_tokens; t += 2) {  // tokens 0, 2, 4; 1 and 3 have none
    x[t * n_in + 17] = 60.0f;
    x[t * n_in + 200] = -35.0f;
  }
  std::vector<float> want(static_cast<size_t>(n_tokens * n_out));
  matmul_reference(m.w, x.data(), want.data(), n_tokens);
  // The largest error of each token's outputs.
  auto token_errors = [&](float threshold, Isa isa) {
    set_int8_outlier_threshold(threshold);
    ThreadPool pool(2);
    Scratch scratch;
    reserve(scratch, pool.n_threads(), m.w, n_tokens);
    std::vector<float> got(want.size());
    matmul_isa(m.w, x.data(), got.data(), n_tokens, pool, scratch, isa);
    set_int8_outlier_threshold(6.0f);
    std::vector<double> err(n_tokens, 0.0);
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t o = 0; o < n_out; ++o)
        err[t] = std::max(err[t], std::fabs(double(got[t * n_out + o]) - want[t * n_out + o]));
    return err;
  };
  for (Isa isa : isas()) {
    const std::vector<double> with = token_errors(6.0f, isa), without = token_errors(0.0f, isa);
    const double plain = std::max(with[1], with[3]);  // the 8-bit rounding of ordinary activations
    for (int64_t t : {0, 2, 4}) {
      EXPECT_LT(with[t], 1.5 * plain) << isa_name(isa) << " token " << t;
      EXPECT_GT(without[t], 4 * with[t]) << isa_name(isa) << " token " << t;
    }
    EXPECT_EQ(with[1], without[1]);  // no outliers: the same computation
  }
}

// The outliers are decided per token: a token's result is the same alone as beside a
// token with outliers, and the same in any batch: 4 tokens, and 37 (on AMX two tiles of
// 16, whose activation layout sits beside the outlier masks, and 5 more).
TEST(MatmulInt8, OutliersOfOneTokenDoNotChangeAnother) {
  const int64_t n_in = 192, n_out = 33;
  const QuantizedMatrix m = make_matrix(DType::I8_ROWS, n_in, n_out);
  for (int64_t n_tokens : {4, 37}) {
    auto x = random_floats(static_cast<size_t>(n_tokens * n_in), 3);
    x[1 * n_in + 5] = 50.0f;
    x[3 * n_in + 100] = -9.0f;
    x[(n_tokens - 1) * n_in + 7] = 12.0f;
    ThreadPool pool(2);
    Scratch scratch;
    reserve(scratch, pool.n_threads(), m.w, n_tokens);
    std::vector<float> batch(static_cast<size_t>(n_tokens * n_out)), alone(static_cast<size_t>(n_out));
    matmul(m.w, x.data(), batch.data(), n_tokens, pool, scratch);
    for (int64_t t = 0; t < n_tokens; ++t) {
      matmul(m.w, x.data() + t * n_in, alone.data(), 1, pool, scratch);
      EXPECT_EQ(0, std::memcmp(alone.data(), batch.data() + t * n_out, alone.size() * sizeof(float)))
          << n_tokens << " tokens, token " << t;
    }
  }
}

}  // namespace
}  // namespace ridge::kernels
