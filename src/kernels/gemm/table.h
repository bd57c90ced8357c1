// The quantized GEMM behind matmul(): activations are quantized once per call (8-bit
// blocks, as ggml does), then integer dot products run against the weight blocks as they
// lie in the GGUF file. One table per ISA, indexed by weight type (ggml's type_traits_cpu),
// says for each type what runs: the activation format and its quantizer, and the GEMM.
// Each weight type has a scalar reference the fast entries are tested against.
//
//   const GemmKernel* k = gemm_kernel(DType::Q4_K, best_isa());   // null: no integer path
//   k->quantize(x, act, n_in);                                     // one token row
//   k->gemm({n_in, w_bytes, row_bytes, act, act_row_bytes(k->act, n_in), y, n_out}, n_out, 1);
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/dtype.h"
#include "kernels/isa.h"

namespace ridge::kernels {

// How a token row of activations is stored for a weight type.
//  kF32:  the floats as they are (F16, BF16 weights: converted in registers, f32 math).
//  kQ8_0: n_in int8 values q, then n_in / 32 float scales d, then n_in / 32 int32 sums
//         of each block's q; x[i] ~ d[i / 32] * q[i]. Float (not f16) scales: no second
//         rounding. The sums let Q4_0/Q5_0 multiply unsigned nibbles (q_w - 8 = nibble - 8:
//         dot = sum(nibble * q) - 8 * sum(q)) without the sign trick, and Q4_1/Q5_1 add
//         their min (m * d * sum(q)) from them.
//  kQ8_K: n_in / 256 BlockQ8_K (float d, 256 int8, 16 sums of 16), for the K-quants.
// Every 8-bit format uses d = max|x| / 127 and q = round-half-even(x * (1 / d)), so the
// scalar and AVX2 quantizers produce the same bytes.
enum class ActFormat { kF32, kQ8_0, kQ8_K };

// Bytes of one quantized activation row (kF32: n_in floats), rounded up to 64.
size_t act_row_bytes(ActFormat format, int64_t n_in);

// Quantizes one token row x[n_in] into dst (act_row_bytes(format, n_in) bytes).
// n_in must be a multiple of the format's block (32 or 256). kF32 copies.
using QuantizeActFn = void (*)(const float* x, uint8_t* dst, int64_t n_in);

// The quantizer the ISA's tables use for a format (kScalar: the references; every other
// ISA: the AVX2 ones, which write the same bytes), and a call of it.
QuantizeActFn act_quantizer(ActFormat format, Isa isa);
void quantize_activations(ActFormat format, Isa isa, const float* x, uint8_t* dst, int64_t n_in);

// One GEMM call: y[t * ldy + r] = dot(weight row r, activation row t).
struct GemmArgs {
  int64_t n_in = 0;          // elements per row (a multiple of the weight block size)
  const uint8_t* w = nullptr;    // weight row 0
  size_t w_stride = 0;           // bytes between weight rows
  const uint8_t* act = nullptr;  // activation row 0, in the kernel's ActFormat
  size_t act_stride = 0;         // bytes between activation rows
  float* y = nullptr;            // y[t * ldy + r]
  int64_t ldy = 0;
  // kQ8_0 batches (optional; AVX2): the activation scales and block sums transposed,
  // scales_t[b * scales_t_stride + t] = scale of block b of token t, sums_t likewise,
  // with scales_t_stride = n_tokens rounded up to 8 (padding zero). Null: none.
  const float* scales_t = nullptr;
  const int32_t* sums_t = nullptr;
  int64_t scales_t_stride = 0;
  // AMX kernels (optional): every whole 16-token tile of the batch, laid out by
  // amx_build_act_tiles (gemm/amx.h) once for all threads. Null: each call lays out its own.
  const uint8_t* amx_tiles = nullptr;
  // AMX kernels at one token tile (16-31 tokens; optional): that tile's activations
  // transposed into the rows kernels' B operand by amx_build_rows_b (gemm/amx.h), once for
  // all threads. Null: each call transposes them.
  const uint8_t* amx_rows_b = nullptr;
};

// The transposed kQ8_0 tables for n_tokens rows of n_in: 4-byte entries per table, the
// stride, and the fill (scales into dst, sums right after: dst + q8_0_scales_t_floats).
size_t q8_0_scales_t_floats(int64_t n_in, int64_t n_tokens);
int64_t q8_0_scales_t_stride(int64_t n_tokens);
void transpose_q8_0_scales(const uint8_t* act, size_t act_stride, int64_t n_in, int64_t n_tokens, float* dst);

// Computes the n_rows x n_tokens block of outputs. The value of each output depends only
// on its weight row and activation row: not on n_rows, n_tokens or tiling, so a token's
// result is the same in any batch.
using GemmFn = void (*)(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);

// One weight type's row of an ISA's table. There is no separate decode dot: gemm takes
// any n_tokens and picks its own tiles for one token or a few (decode).
struct GemmKernel {
  Isa isa = Isa::kScalar;            // the code gemm runs: a table takes a lower ISA's kernel
                                     // where it has none of its own (avx512_vnni's F16: avx2)
  ActFormat act = ActFormat::kF32;   // the activation rows gemm reads
  int64_t block = 1;                 // the weight type's block size (n_in must be a multiple)
  QuantizeActFn quantize = nullptr;  // x -> an activation row; entries of one format write the
                                     // same bytes, so one quantized x serves mixed types
  GemmFn gemm = nullptr;             // null: the type has no integer path on this ISA
  // Where this ISA runs the type faster from a layout repacked at load (gemm/repack.h):
  // that layout's type (Q4_K on avx512_vnni: Q4_K_R16), whose own entry then runs.
  std::optional<DType> repack;
};

// An ISA's table, indexed by dtype_slot(weight type) (gemm/table.cpp).
using GemmTable = std::array<GemmKernel, kDTypeSlots>;
const GemmTable& gemm_table(Isa isa);

// The table entry for a weight type and ISA, or null when the type has no kernel of its
// own (Q2_K, Q3_K, ...: matmul runs the F32 entry on those rows dequantized).
const GemmKernel* gemm_kernel(DType weight, Isa isa);

// The scalar GEMM over a reference vec_dot: every (row, token) pair in turn.
template <float (*Dot)(int64_t, const uint8_t*, const uint8_t*)>
void gemm_rows_scalar(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t r = 0; r < n_rows; ++r)
      a.y[t * a.ldy + r] = Dot(a.n_in, a.w + r * a.w_stride, a.act + t * a.act_stride);
}

// Scalar references: the activation quantizers, and one weight row against one activation
// row, with integer block sums and one float multiply-add per block in block order.
void quantize_act_q8_0_scalar(const float* x, uint8_t* dst, int64_t n_in);
void quantize_act_q8_k_scalar(const float* x, uint8_t* dst, int64_t n_in);
float vec_dot_q8_0_scalar(int64_t n, const uint8_t* w, const uint8_t* act);
float vec_dot_q4_0_scalar(int64_t n, const uint8_t* w, const uint8_t* act);
float vec_dot_q5_0_scalar(int64_t n, const uint8_t* w, const uint8_t* act);
float vec_dot_q4_1_scalar(int64_t n, const uint8_t* w, const uint8_t* act);  // two fmas a block:
float vec_dot_q5_1_scalar(int64_t n, const uint8_t* w, const uint8_t* act);  // scale, then min
float vec_dot_q4_k_scalar(int64_t n, const uint8_t* w, const uint8_t* act);
float vec_dot_q5_k_scalar(int64_t n, const uint8_t* w, const uint8_t* act);
float vec_dot_q6_k_scalar(int64_t n, const uint8_t* w, const uint8_t* act);
float vec_dot_f32_scalar(int64_t n, const uint8_t* w, const uint8_t* act);
float vec_dot_f16_scalar(int64_t n, const uint8_t* w, const uint8_t* act);
float vec_dot_bf16_scalar(int64_t n, const uint8_t* w, const uint8_t* act);
// The runtime formats (core/quant_bnb.h, gemm/reference_bnb.cpp): one fma per 32-element group.
float vec_dot_nf4_scalar(int64_t n, const uint8_t* w, const uint8_t* act);
float vec_dot_i8_rows_scalar(int64_t n, const uint8_t* w, const uint8_t* act);

// Q4_K_R16, Q4_K interleaved by 16 rows at load (gemm/repack.h), against Q8_K
// activations; each output bit-identical to vec_dot_q4_k_scalar on the row's Q4_K
// blocks. The scalar reference unpacks each row and runs that (gemm/repack.cpp); AVX2
// (gemm/avx2_repack.cpp) and AVX-512 VNNI (gemm/avx512_repack.cpp) put the 16 rows in
// vector lanes. Called with w at a group's first row (r0 a multiple of 16).
void gemm_q4_k_r16_scalar(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q4_k_r16_avx2(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q4_k_r16_avx512(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);

// AVX2 versions (gemm/avx2.cpp); call only when cpu_supports(Isa::kAvx2).
void quantize_act_q8_0_avx2(const float* x, uint8_t* dst, int64_t n_in);
void quantize_act_q8_k_avx2(const float* x, uint8_t* dst, int64_t n_in);
void gemm_q8_0_avx2(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q4_0_avx2(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q5_0_avx2(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q4_1_avx2(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q5_1_avx2(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q4_k_avx2(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q5_k_avx2(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q6_k_avx2(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_f32_avx2(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_f16_avx2(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_bf16_avx2(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
// NF4 and I8_ROWS (gemm/avx2_bnb.cpp), bit-identical to their scalar references.
void gemm_nf4_avx2(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_i8_rows_avx2(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);

// AVX-VNNI builds of the Q8_0-family tiles (gemm/avx_vnni.cpp) and of the K-quant tiles
// (gemm/avx2.cpp: vpdpwssd for madd + add), bit-identical to the AVX2 ones: the kAvxVnni
// table's entries.
void gemm_q8_0_avxvnni(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q4_0_avxvnni(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q5_0_avxvnni(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q4_1_avxvnni(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q5_1_avxvnni(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q4_k_avxvnni(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q5_k_avxvnni(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q6_k_avxvnni(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);

// AVX-512 builds (gemm/avx512.cpp): rows in vector lanes, packed 16-row panels for
// batches of 4 tokens or more. Each output is bit-identical to the scalar reference
// (same integer block dots, same fma per block in block order): the kAvx512Vnni table's
// entries (AVX-512 F, BW, VL, DQ, VNNI and BITALG: Ice Lake, Zen 4 and later).
void gemm_q8_0_avx512(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q4_0_avx512(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q5_0_avx512(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q4_1_avx512(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q5_1_avx512(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q4_k_avx512(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q5_k_avx512(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_q6_k_avx512(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
// NF4 and I8_ROWS with vpdpbusd, bit-identical likewise: row-major tiles for a few
// tokens (gemm/avx512_bnb.cpp), 16-row panels for more (gemm/avx512_bnb_panels.h).
void gemm_nf4_avx512(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_i8_rows_avx512(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_nf4_avx512_rows(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);
void gemm_i8_rows_avx512_rows(const GemmArgs& args, int64_t n_rows, int64_t n_tokens);

}  // namespace ridge::kernels
