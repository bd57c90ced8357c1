// The quantized GEMM pieces: activation quantizers (every ISA's byte-identical to scalar,
// error within half a step), each scalar vec_dot against a double dot of the dequantized
// weights and activations, the per-ISA tables' shape, and every entry of every ISA's
// table against the scalar reference on weight blocks of random bytes (every bit pattern
// of scales, nibbles and high bits) and on the largest magnitudes, with odd numbers of
// rows and tokens: bit for bit where the kernels promise it. ISAs this CPU lacks are
// reported as skipped.
#include "kernels/gemm/table.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "gemm_test_util.h"
#include "test_util.h"

namespace ridge::kernels {
namespace {

using testing::random_weight_bytes;
using testing::run_gemm;

using testing::random_floats;

struct TypeCase {
  DType type;
  float (*scalar_dot)(int64_t, const uint8_t*, const uint8_t*);
};

const TypeCase kCases[] = {
    {DType::Q8_0, vec_dot_q8_0_scalar}, {DType::Q4_0, vec_dot_q4_0_scalar}, {DType::Q5_0, vec_dot_q5_0_scalar},
    {DType::Q4_K, vec_dot_q4_k_scalar}, {DType::Q5_K, vec_dot_q5_k_scalar}, {DType::Q6_K, vec_dot_q6_k_scalar},
    {DType::F16, vec_dot_f16_scalar},   {DType::BF16, vec_dot_bf16_scalar},
    {DType::Q4_1, vec_dot_q4_1_scalar}, {DType::Q5_1, vec_dot_q5_1_scalar},
};

// Every type the tables have an integer path for (the runtime formats' own tests:
// gemm_bnb_test.cpp).
const DType kTableTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q4_1, DType::Q5_1,
                             DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::F32,  DType::F16,
                             DType::BF16, DType::NF4,  DType::I8_ROWS};

// Skips the running test, saying which ISA this CPU lacks (never a silent pass).
#define SKIP_UNLESS_CPU_SUPPORTS(isa) \
  if (!cpu_supports(isa)) GTEST_SKIP() << "skipped: no " << isa_name(isa)


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

class ActivationQuantization : public ::testing::TestWithParam<Isa> {};

// Each ISA's quantizers write the scalar ones' bytes (so one quantized row serves any
// entry of its format), within half a step of x.
TEST_P(ActivationQuantization, BytesEqualScalarAndErrorIsHalfAStep) {
  const Isa isa = GetParam();
  SKIP_UNLESS_CPU_SUPPORTS(isa);
  const int64_t n = 3 * 256;
  auto x = random_floats(n, 3, 2.0f);
  for (int i = 0; i < 32; ++i) x[32 + i] = 0.0f;                   // an all-zero block
  x[100] = 1e6f;                                                     // one huge value
  for (int i = 0; i < 32; ++i) x[256 + i] = (i % 2 ? 0.5f : -0.5f) * 127 / 127;  // ties
  for (ActFormat format : {ActFormat::kQ8_0, ActFormat::kQ8_K}) {
    const size_t bytes = act_row_bytes(format, n);
    std::vector<uint8_t> slow(bytes, 0), fast(bytes, 0);
    quantize_activations(format, Isa::kScalar, x.data(), slow.data(), n);
    act_quantizer(format, isa)(x.data(), fast.data(), n);
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

INSTANTIATE_TEST_SUITE_P(Isas, ActivationQuantization, ::testing::ValuesIn(kAllIsas),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

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

INSTANTIATE_TEST_SUITE_P(WeightTypes, GemmByType, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(dtype_name(info.param.type)); });


// Where a table entry's kernel promises the scalar reference's bits (kernels/gemm/table.h): the same
// integer block dots and the same fma per block in block order. The AVX-512 VNNI builds,
// the runtime formats' builds on every ISA, and the AMX entries (issue 15 asks the same
// of them). The AVX-VNNI builds promise the AVX2 builds' bits instead; the other AVX2
// builds, float reordering only.
bool promises_scalar_bits(const GemmKernel& k, DType type) {
  if (k.isa == Isa::kScalar || type == DType::NF4 || type == DType::I8_ROWS) return true;
  return k.isa == Isa::kAvx512Vnni || k.isa == Isa::kAmxInt8;
}

// Whether a table for `table` may hold an entry built for `entry`: its own, or one whose
// instructions it has (every ISA above scalar has AVX2's; amx_int8 has avx512_vnni's).
bool table_may_hold(Isa table, Isa entry) {
  if (entry == table) return true;
  if (entry == Isa::kAvx2) return table != Isa::kScalar;
  if (entry == Isa::kAvx512Vnni) return table == Isa::kAmxInt8;
  return false;
}

// Every ISA's table has an entry for each type the scalar table has (none falls back to
// dequantized rows unnoticed), with the same activation format and block, a quantizer,
// and a kernel built for instructions that ISA has. These are facts of the tables, so
// they hold on any CPU.
TEST(GemmTable, EveryIsaCoversTheScalarTypesWithItsOwnInstructions) {
  for (Isa isa : kAllIsas) {
    SCOPED_TRACE(isa_name(isa));
    for (uint32_t slot = 0; slot < kDTypeSlots; ++slot) {
      const GemmKernel& ref = gemm_table(Isa::kScalar)[slot];
      const GemmKernel& k = gemm_table(isa)[slot];
      EXPECT_EQ(k.gemm != nullptr, ref.gemm != nullptr) << "slot " << slot;
      if (k.gemm == nullptr) continue;
      EXPECT_EQ(k.act, ref.act) << "slot " << slot;
      EXPECT_EQ(k.block, ref.block) << "slot " << slot;
      EXPECT_NE(k.quantize, nullptr) << "slot " << slot;
      EXPECT_TRUE(table_may_hold(isa, k.isa)) << "slot " << slot << " runs " << isa_name(k.isa);
    }
    for (DType type : kTableTypes) {
      const GemmKernel* k = gemm_kernel(type, isa);
      ASSERT_NE(k, nullptr) << dtype_name(type);
      EXPECT_EQ(k, &gemm_table(isa)[dtype_slot(type)]);
      EXPECT_EQ(k->block, type_traits(type).block_size) << dtype_name(type);
    }
    for (DType type : {DType::Q2_K, DType::Q3_K, DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4, DType::TQ1_0, DType::TQ2_0,
                       DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S, DType::IQ1_S,
                       DType::IQ1_M, DType::NVFP4})
      EXPECT_EQ(gemm_kernel(type, isa), nullptr) << dtype_name(type) << " has no kernel: its rows run dequantized";
  }
}

struct EntryCase {
  Isa isa;
  DType type;
};

void PrintTo(const EntryCase& c, std::ostream* os) { *os << isa_name(c.isa) << " " << dtype_name(c.type); }

std::vector<EntryCase> entry_cases() {
  std::vector<EntryCase> v;
  for (Isa isa : kAllIsas)
    for (DType type : kTableTypes) v.push_back({isa, type});
  return v;
}

class GemmTableEntry : public ::testing::TestWithParam<EntryCase> {};

// The entry's quantizer writes the scalar bytes, and its GEMM gives the scalar reference:
// bit for bit where promised (promises_scalar_bits; AVX-VNNI: the AVX2 entry's bits), else
// within float reordering. Widths of one block and of several, rows that do not fill a
// tile or a 16-row panel, token counts on both sides of every tile and panel threshold,
// random blocks and the largest magnitudes (maddubs must not saturate); nothing written
// outside the tile.
TEST_P(GemmTableEntry, MatchesScalarReference) {
  const auto [isa, type] = GetParam();
  SKIP_UNLESS_CPU_SUPPORTS(isa);
  const GemmKernel* fast = gemm_kernel(type, isa);
  const GemmKernel* slow = gemm_kernel(type, Isa::kScalar);
  ASSERT_NE(fast, nullptr);
  ASSERT_NE(slow, nullptr);
  const GemmKernel* avx2 = fast->isa == Isa::kAvxVnni ? gemm_kernel(type, Isa::kAvx2) : nullptr;
  const bool bits = promises_scalar_bits(*fast, type);
  const TypeTraits& traits = type_traits(type);
  const bool quant_blocks = traits.row_header == 0 && traits.block_size > 1;
  for (const int64_t n : {traits.block_size == 1 ? int64_t{32} : traits.block_size, width_for(type)}) {
    const size_t stride = act_row_bytes(fast->act, n);
    for (bool extreme : {false, true}) {
      for (int64_t n_rows : {1, 7, 16, 23, 37}) {
        for (int64_t n_tokens : {1, 2, 3, 4, 5, 8, 9, 17, 18}) {
          auto w = random_weight_bytes(type, n, n_rows, static_cast<uint32_t>(n * 3 + n_rows * 131 + n_tokens));
          if (extreme && quant_blocks) testing::make_extreme(type, w);
          auto x = random_floats(static_cast<size_t>(n * n_tokens), 70 + static_cast<uint32_t>(n_tokens), 4.0f);
          if (extreme)
            for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0) ? -1.0f : 1.0f;  // every q at +-127
          std::vector<uint8_t> act(stride * n_tokens), act_ref(stride * n_tokens);
          for (int64_t t = 0; t < n_tokens; ++t) {
            fast->quantize(x.data() + t * n, act.data() + t * stride, n);
            slow->quantize(x.data() + t * n, act_ref.data() + t * stride, n);
          }
          ASSERT_EQ(act, act_ref) << "quantizer bytes, width " << n << " tokens " << n_tokens;
          const int64_t ldy = n_rows + 3;
          const size_t w_stride = row_size(type, n);
          const auto want = run_gemm(slow->gemm, slow->act, w, w_stride, act, stride, n, n_rows, n_tokens, ldy);
          const auto got = run_gemm(fast->gemm, fast->act, w, w_stride, act, stride, n, n_rows, n_tokens, ldy);
          const auto also = avx2 ? run_gemm(avx2->gemm, avx2->act, w, w_stride, act, stride, n, n_rows, n_tokens, ldy)
                                 : std::vector<float>();
          // Float reordering and int -> float rounding of partial sums (K-quant sums pass
          // 2^24) scale with the outputs' magnitude.
          float scale = 0;
          for (float v : want) scale = std::max(scale, std::fabs(v));
          for (int64_t t = 0; t < n_tokens; ++t) {
            for (int64_t r = 0; r < n_rows; ++r) {
              const size_t i = static_cast<size_t>(t * ldy + r);
              const auto where = [&] {
                return ::testing::Message() << "width " << n << " rows " << n_rows << " tokens " << n_tokens
                                            << " extreme " << extreme << " at " << t << "," << r << " (runs "
                                            << isa_name(fast->isa) << ")";
              };
              if (bits) {
                ASSERT_EQ(got[i], want[i]) << where();
              } else {
                const double tolerance = 2e-5 * std::fabs(want[i]) + 2e-5 * scale + (extreme ? 1e-3 : 1e-4);
                ASSERT_NEAR(got[i], want[i], tolerance) << where();
              }
              if (avx2) {
                ASSERT_EQ(got[i], also[i]) << "not the AVX2 entry's bits: " << where();
              }
            }
            for (int64_t r = n_rows; r < ldy; ++r) ASSERT_EQ(got[t * ldy + r], -7.0f) << "wrote outside the tile";
          }
        }
      }
    }
  }
}

// Every weight and every activation at its largest magnitude, all of one sign: the
// widest integer sums the kernels meet. The AVX2 4/5-bit tiles add four blocks' maddubs
// products in int16 before widening (2 * 31 * 127 per pair, 31496 for four), and any
// tile that added more, or saturated, would be off by thousands here, where random
// weights and mixed-sign activations stay far from the limit.
TEST_P(GemmTableEntry, LargestMagnitudesOfOneSignMatchScalarReference) {
  const auto [isa, type] = GetParam();
  SKIP_UNLESS_CPU_SUPPORTS(isa);
  const TypeTraits& traits = type_traits(type);
  if (traits.row_header != 0 || traits.block_size == 1) GTEST_SKIP() << "not a block-quantized type";
  const GemmKernel* fast = gemm_kernel(type, isa);
  const GemmKernel* slow = gemm_kernel(type, Isa::kScalar);
  ASSERT_NE(fast, nullptr);
  ASSERT_NE(slow, nullptr);
  const int64_t n = width_for(type), n_rows = 17, ldy = n_rows;
  const size_t w_stride = row_size(type, n);
  // 0xff: every nibble 15 and every high bit set (q = 31 for Q5_0/Q5_1, scales 63 for
  // the K-quants); Q8_0's largest magnitude is -128.
  std::vector<uint8_t> w(w_stride * n_rows, type == DType::Q8_0 ? 0x80 : 0xff);
  testing::make_extreme(type, w);  // only sets every block's d (and min) to 0.01
  const size_t stride = act_row_bytes(fast->act, n);
  for (float sign : {1.0f, -1.0f}) {
    for (int64_t n_tokens : {1, 8, 9}) {
      const std::vector<float> x(static_cast<size_t>(n * n_tokens), sign);  // every q at +-127
      std::vector<uint8_t> act(stride * n_tokens);
      for (int64_t t = 0; t < n_tokens; ++t) slow->quantize(x.data() + t * n, act.data() + t * stride, n);
      const auto want = run_gemm(slow->gemm, slow->act, w, w_stride, act, stride, n, n_rows, n_tokens, ldy);
      const auto got = run_gemm(fast->gemm, fast->act, w, w_stride, act, stride, n, n_rows, n_tokens, ldy);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-4)
            << "sign " << sign << " tokens " << n_tokens << " output " << i << " (runs " << isa_name(fast->isa) << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(IsasAndTypes, GemmTableEntry, ::testing::ValuesIn(entry_cases()), [](const auto& info) {
  return std::string(isa_name(info.param.isa)) + "_" + std::string(dtype_name(info.param.type));
});

}  // namespace
}  // namespace ridge::kernels
