// The integer GEMM of the runtime weight formats NF4 and I8_ROWS: every kernel the CPU
// runs (scalar, AVX2, AVX-512 VNNI) gives the scalar reference's bits; the reference is
// the double dot of the dequantized weights and activations up to the int8 rounding of
// the NF4 code points; the NF4 nibble order (low nibbles = a block's first 32); and
// matmul() over these rows (header included in the row stride).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/quant_bnb.h"
#include "core/thread_pool.h"
#include "kernels/gemm/table.h"
#include "kernels/gemm/gemm.h"
#include "test_util.h"

namespace ridge::kernels {
namespace {

using testing::random_floats;

struct Format {
  DType type;
  float (*scalar_dot)(int64_t, const uint8_t*, const uint8_t*);
  GemmFn avx2, avx512, avx512_rows;
};

void PrintTo(const Format& f, std::ostream* os) { *os << dtype_name(f.type); }

const Format kFormats[] = {
    {DType::NF4, vec_dot_nf4_scalar, gemm_nf4_avx2, gemm_nf4_avx512, gemm_nf4_avx512_rows},
    {DType::I8_ROWS, vec_dot_i8_rows_scalar, gemm_i8_rows_avx2, gemm_i8_rows_avx512, gemm_i8_rows_avx512_rows},
};

// n_rows quantized rows of n_in random normal values (each row its own scale), packed.
std::vector<uint8_t> quantized_rows(DType type, int64_t n_in, int64_t n_rows, uint32_t seed) {
  const size_t row = row_size(type, n_in);
  const auto values = random_floats(static_cast<size_t>(n_in * n_rows), seed, 0.05f);
  std::vector<uint8_t> bytes(row * static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    if (type == DType::NF4) quantize_row_nf4(values.data() + r * n_in, bytes.data() + r * row, n_in);
    else quantize_row_i8_rows(values.data() + r * n_in, bytes.data() + r * row, n_in);
  }
  return bytes;
}

// n_tokens activation rows quantized to kQ8_0 (scalar quantizer); `extreme`: every q at
// +-127, the largest integer products.
std::vector<uint8_t> activations(int64_t n_in, int64_t n_tokens, uint32_t seed, bool extreme = false) {
  const size_t stride = act_row_bytes(ActFormat::kQ8_0, n_in);
  auto x = random_floats(static_cast<size_t>(n_in * n_tokens), seed, 3.0f);
  if (extreme)
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0) ? -1.0f : 1.0f;
  std::vector<uint8_t> act(stride * static_cast<size_t>(n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t)
    quantize_activations(ActFormat::kQ8_0, Isa::kScalar, x.data() + t * n_in, act.data() + t * stride, n_in);
  return act;
}

// y = fn over n_rows x n_tokens, with ldy wider than n_rows (filled with -7 elsewhere).
std::vector<float> run(GemmFn fn, DType type, const std::vector<uint8_t>& w, const std::vector<uint8_t>& act,
                       int64_t n_in, int64_t n_rows, int64_t n_tokens) {
  const int64_t ldy = n_rows + 3;
  std::vector<float> y(static_cast<size_t>(ldy * n_tokens), -7.0f);
  fn({n_in, w.data(), row_size(type, n_in), act.data(), act_row_bytes(ActFormat::kQ8_0, n_in), y.data(), ldy},
     n_rows, n_tokens);
  return y;
}

// The kernels this CPU can run, by name: each build, and each ISA's table entry.
std::vector<std::pair<std::string, GemmFn>> fast_kernels(const Format& f) {
  std::vector<std::pair<std::string, GemmFn>> kernels;
  if (cpu_supports(Isa::kAvx2)) kernels.emplace_back("avx2", f.avx2);
  if (cpu_supports(Isa::kAvx512Vnni)) {
    kernels.emplace_back("avx512", f.avx512);  // row-major below 4 tokens, panels from 4
    kernels.emplace_back("avx512 rows", f.avx512_rows);
  }
  for (Isa isa : testing::supported_isas())
    if (isa != Isa::kScalar) kernels.emplace_back(str_cat("table ", isa_name(isa)), gemm_kernel(f.type, isa)->gemm);
  return kernels;
}

class GemmBnb : public ::testing::TestWithParam<Format> {};

TEST_P(GemmBnb, KernelTableEntries) {
  const Format f = GetParam();
  for (Isa isa : kAllIsas) {
    const GemmKernel* k = gemm_kernel(f.type, isa);
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->act, ActFormat::kQ8_0);
    EXPECT_EQ(k->block, f.type == DType::NF4 ? 64 : 32);
  }
}

// Every fast kernel: the scalar reference's bits, for partial row tiles, partial token
// passes, widths of one block and of many, and the largest magnitudes.
TEST_P(GemmBnb, FastKernelsEqualScalarBitForBit) {
  const Format f = GetParam();
  const auto kernels = fast_kernels(f);
  if (kernels.empty()) GTEST_SKIP() << "skipped: no avx2";
  const GemmFn scalar = gemm_kernel(f.type, Isa::kScalar)->gemm;
  std::vector<int64_t> widths = {64, 192, 4096};
  if (f.type == DType::I8_ROWS) widths.push_back(96);  // an odd number of 32-groups
  for (int64_t n_in : widths) {
    for (bool extreme : {false, true}) {
      for (int64_t n_rows : {1, 3, 17, 64}) {
        for (int64_t n_tokens : {1, 2, 4, 5, 9, 18, 40}) {  // AMX: a tile + 2, two tiles + 8
          const auto seed = static_cast<uint32_t>(n_in + 7 * n_rows + n_tokens);
          auto w = quantized_rows(f.type, n_in, n_rows, seed);
          if (extreme && f.type == DType::NF4) {  // nibbles 0 and 15: weights -127 and 127
            for (int64_t r = 0; r < n_rows; ++r) {
              const Nf4Row row = nf4_row(w.data() + r * row_size(f.type, n_in), n_in);
              auto* qs = const_cast<uint8_t*>(row.qs);
              for (int64_t i = 0; i < n_in / 2; ++i) qs[i] = (i % 5 == 0) ? 0x00 : (i % 2 ? 0xff : 0x0f);
            }
          } else if (extreme) {  // -128 and 127
            for (int64_t r = 0; r < n_rows; ++r) {
              auto* q = reinterpret_cast<int8_t*>(w.data() + r * row_size(f.type, n_in) + sizeof(float));
              for (int64_t i = 0; i < n_in; ++i) q[i] = (i % 2) ? -128 : 127;
            }
          }
          const auto act = activations(n_in, n_tokens, seed + 1, extreme);
          const auto want = run(scalar, f.type, w, act, n_in, n_rows, n_tokens);
          for (const auto& [name, fn] : kernels) {
            const auto got = run(fn, f.type, w, act, n_in, n_rows, n_tokens);
            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
                << dtype_name(f.type) << " " << name << " n_in " << n_in << " rows " << n_rows << " tokens "
                << n_tokens << " extreme " << extreme;
          }
        }
      }
    }
  }
}

// The scalar reference against a double dot of what the bytes stand for. NF4's kernels
// multiply round(127 * v) / 127 for each code point v, which moves a weight by at most
// absmax_b * 0.5 / 127; I8_ROWS differs by float rounding only.
TEST_P(GemmBnb, ScalarDotEqualsDequantizedDot) {
  const Format f = GetParam();
  for (int64_t n_in : {64, 192, 4096}) {
    const int64_t n_rows = 5;
    const auto w = quantized_rows(f.type, n_in, n_rows, static_cast<uint32_t>(n_in));
    const auto act = activations(n_in, 1, 3);
    const auto* q = reinterpret_cast<const int8_t*>(act.data());
    const auto* d = reinterpret_cast<const float*>(act.data() + n_in);
    std::vector<float> wf(static_cast<size_t>(n_in));
    for (int64_t r = 0; r < n_rows; ++r) {
      const uint8_t* row = w.data() + r * row_size(f.type, n_in);
      if (f.type == DType::NF4) dequantize_row_nf4(row, wf.data(), n_in);
      else dequantize_row_i8_rows(row, wf.data(), n_in);
      double want = 0, magnitude = 0, code_rounding = 0;
      for (int64_t i = 0; i < n_in; ++i) {
        const double x = double(d[i / 32]) * q[i];
        want += double(wf[i]) * x;
        magnitude += std::fabs(double(wf[i]) * x);
        if (f.type == DType::NF4)
          code_rounding += nf4_absmax(nf4_row(row, n_in), dynamic_map(), i / 64) * 0.5 / 127 * std::fabs(x);
      }
      const double got = f.scalar_dot(n_in, row, act.data());
      EXPECT_NEAR(got, want, code_rounding + 1e-5 * magnitude + 1e-7)
          << dtype_name(f.type) << " n_in " << n_in << " row " << r;
    }
  }
}

// matmul() over packed rows (weight_matrix: stride row_size, header included), threads
// and ISAs: the scalar reference's bits for every output. The activations stay well
// below I8_ROWS' outlier threshold, so the int8 product is all there is.
TEST_P(GemmBnb, MatmulEqualsScalarReference) {
  const Format f = GetParam();
  const int64_t n_in = 192, n_out = 37, n_tokens = 6;
  const auto bytes = quantized_rows(f.type, n_in, n_out, 77);
  const WeightMatrix w = weight_matrix(f.type, n_in, n_out, bytes.data());
  ASSERT_EQ(w.row_bytes, row_size(f.type, n_in));
  const auto x = random_floats(static_cast<size_t>(n_in * n_tokens), 78);
  ThreadPool pool(2);
  Scratch scratch(pool.n_threads(), matmul_scratch_floats(w));
  scratch.reserve_shared(matmul_shared_bytes(w, n_tokens));
  for (Isa isa : testing::supported_isas()) {
    std::vector<float> y(static_cast<size_t>(n_out * n_tokens));
    matmul_isa(w, x.data(), y.data(), n_tokens, pool, scratch, isa);
    std::vector<uint8_t> act_t(act_row_bytes(ActFormat::kQ8_0, n_in));
    for (int64_t t = 0; t < n_tokens; ++t) {
      quantize_activations(ActFormat::kQ8_0, Isa::kScalar, x.data() + t * n_in, act_t.data(), n_in);
      for (int64_t o = 0; o < n_out; ++o)
        ASSERT_EQ(y[t * n_out + o], f.scalar_dot(n_in, bytes.data() + o * w.row_bytes, act_t.data()))
             << dtype_name(f.type) << " isa " << isa_name(isa) << " token " << t << " row " << o;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, GemmBnb, ::testing::ValuesIn(kFormats),
                         [](const auto& info) { return std::string(dtype_name(info.param.type)); });

// One NF4 block with absmax 1 (offset 1, absmax2 0): low nibbles 15 (+1), high nibbles
// 7 (0), against activations 1 on elements 0..31 and 0 on 32..63. The low nibbles are
// elements 0..31, so the dot is 32; read the other way round it would be 0.
TEST(GemmNf4, LowNibblesAreTheFirstHalfOfABlock) {
  const int64_t n = 64;
  std::vector<uint8_t> w(row_size(DType::NF4, n));
  const float absmax2 = 0.0f, offset = 1.0f;
  std::memcpy(w.data(), &absmax2, sizeof(float));
  std::memcpy(w.data() + sizeof(float), &offset, sizeof(float));
  w[8] = 0;                                   // code of block 0 (any: absmax2 is 0)
  std::memset(w.data() + 9, 0x7f, 32);        // byte l: element l = 15, element l + 32 = 7
  std::vector<float> x(n, 0.0f), wf(n);
  for (int i = 0; i < 32; ++i) x[i] = 1.0f;
  dequantize_row_nf4(w.data(), wf.data(), n);
  EXPECT_EQ(wf[0], 1.0f);
  EXPECT_EQ(wf[32], 0.0f);
  std::vector<uint8_t> act(act_row_bytes(ActFormat::kQ8_0, n));
  quantize_activations(ActFormat::kQ8_0, Isa::kScalar, x.data(), act.data(), n);
  EXPECT_NEAR(vec_dot_nf4_scalar(n, w.data(), act.data()), 32.0f, 1e-4);
  for (const auto& [name, fn] : fast_kernels(kFormats[0])) {
    float y = -7.0f;
    fn({n, w.data(), w.size(), act.data(), act.size(), &y, 1}, 1, 1);
    EXPECT_NEAR(y, 32.0f, 1e-4) << name;
  }
}

}  // namespace
}  // namespace ridge::kernels
