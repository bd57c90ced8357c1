// What the rest of ridge calls for weight products; the rest of kernels/gemm/ is the
// kernel table (table.h), its scalar references and one file per ISA family and AMX.
//
// Weight matmul over all tokens of a step: y[t][o] = dot(W[o], x[t]) with W in any
// dtype the trait table can dequantize. Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K, F16 and BF16
// weights run the quantized GEMM (table.h): the activations are quantized to 8
// bits once per call, and integer dot products run on the weight blocks as stored; F32
// weights use float dots; other types dequantize rows. Weight tiles are reused across
// tokens, so a batch of tokens shares the weight bytes.
//
//   WeightMatrix w = weight_matrix(DType::Q4_K, n_embd, n_ff, tensor_bytes);
//   Scratch scratch(pool.n_threads(), matmul_scratch_floats(w));    // at start-up
//   scratch.reserve_shared(matmul_shared_bytes(w, max_tokens));
//   matmul(w, x, y, n_tokens, pool, scratch);     // x [n_tokens][n_embd] -> y [n_tokens][n_ff]
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/isa.h"
#include "kernels/scratch.h"

namespace ridge::kernels {

// A row-major weight matrix as GGUF stores it: n_out rows of n_in elements each.
struct WeightMatrix {
  DType dtype = DType::F32;
  int64_t n_in = 0;               // columns, contiguous; a multiple of the dtype's block size
  int64_t n_out = 0;              // rows
  const uint8_t* data = nullptr;  // [n_out][row_bytes]
  size_t row_bytes = 0;           // stride between rows; >= row_size(dtype, n_in)
};

// A densely packed matrix (row_bytes = row_size(dtype, n_in)), validated as below.
WeightMatrix weight_matrix(DType dtype, int64_t n_in, int64_t n_out, const void* data);

// Throws ridge::Error naming `name` if matmul cannot use w: unknown dtype, no
// dequantizer, n_in not a multiple of the block size, rows too short, null data.
void check_weight_matrix(const WeightMatrix& w, std::string_view name);

// How matmul multiplies non-F32 weights, process-wide. kQuantized (the default): the
// integer GEMM with 8-bit activations. kFloat: each row dequantized by the trait table's
// reference and multiplied in f32 with the f32 activations (the F32 entry), as before
// activation quantization: several times slower, for comparisons with float references
// (test tools). Scratch sized by matmul_scratch_floats covers both.
enum class MatmulMode { kQuantized, kFloat };
void set_matmul_mode(MatmulMode mode);
MatmulMode matmul_mode();

// LLM.int8's outlier decomposition for DType::I8_ROWS weights, process-wide: in each
// token row the columns with |x| > threshold (6.0 by default, bitsandbytes' default) are
// left out of the int8 product and added in f32 against the dequantized weight columns,
// so the rare large activation features keep their precision and do not flatten the
// 8-bit scale of their block. bitsandbytes takes the columns where any token of the batch
// exceeds the threshold; ridge decides per token, so a token's result never depends on
// its batch. A threshold <= 0 turns the decomposition off (plain vector-wise int8).
void set_int8_outlier_threshold(float threshold);
float int8_outlier_threshold();

// Floats of per-thread scratch matmul(w, ...) needs.
size_t matmul_scratch_floats(const WeightMatrix& w);

// Bytes of shared scratch (Scratch::reserve_shared) matmul(w, ...) needs for up to
// max_tokens tokens: their quantized activations.
size_t matmul_shared_bytes(const WeightMatrix& w, int64_t max_tokens);

// y[t][o] = sum_i W[o][i] * x[t][i] for t < n_tokens, o < n_out. Parallel over output
// rows; y[t][o] depends only on W[o] and x[t] (not on n_tokens or the thread count),
// so a sequence's result does not depend on what else is in the batch.
//   x: [n_tokens][n_in]   y: [n_tokens][n_out]   (y must not alias x)
// Throws ridge::Error if w fails check_weight_matrix or scratch is too small.
void matmul(const WeightMatrix& w, const float* x, float* y, int64_t n_tokens, ThreadPool& pool,
            Scratch& scratch);

// The same x against up to 4 matrices of equal n_in (Q/K/V, gate/up): one parallel
// region, x quantized once, each thread streaming its share of all their rows. ys[i]
// gets exactly what matmul(*ws[i], x, ys[i], ...) gives. Matrices whose kernels take
// different activation formats (or no quantized kernel) run one matmul each.
void matmul_group(std::span<const WeightMatrix* const> ws, const float* x, std::span<float* const> ys,
                  int64_t n_tokens, ThreadPool& pool, Scratch& scratch);

// A gated feed-forward's down projection: y = W · glu(gate, up), glu one of ops/ops.h's
// swiglu or geglu, as `glu(gate, up, gate, n); matmul(w, gate, y, ...)` gives it, bit for
// bit, without that n_tokens x n_in activation written out and read back: where the kernel
// quantizes its input, each token's row is formed in the thread's scratch and quantized
// from there. (For a 512-token prompt through a 1.5B model's FFN that round trip was
// 36 MiB per layer, through memory.) `gate` may be overwritten.
using GluFn = void (*)(const float* gate, const float* up, float* y, int64_t n);
void matmul_glu(const WeightMatrix& w, GluFn glu, float* gate, const float* up, float* y, int64_t n_tokens,
                ThreadPool& pool, Scratch& scratch);

// matmul with the kernels of a given ISA (tests and benchmarks compare each against
// kScalar); throws ridge::Error unless cpu_supports(isa). Types without a kernel of their
// own run the ISA's F32 entry on their rows dequantized.
void matmul_isa(const WeightMatrix& w, const float* x, float* y, int64_t n_tokens, ThreadPool& pool,
                Scratch& scratch, Isa isa);

// What matmul runs for a weight type on an ISA, for start-up lines and `ridge bench`: the
// ISA of its table entry ("avx512_vnni"; "avx2" for avx512_vnni's F16 and F32), or for a
// type without one "f32 avx2 (rows dequantized)".
std::string matmul_kernel_name(DType weight, Isa isa);

// Whether matmul runs a weight type's rows as an integer GEMM with 8-bit activations on
// an ISA (false for F32, F16 and BF16 weights, types without a kernel of their own, and
// MatmulMode::kFloat): the compute roofline counts their products as int8.
bool matmul_quantizes_activations(DType weight, Isa isa);

// The machine's int8 multiply-add throughput through the tiles: `threads` threads each
// running independent TDPBSSDs from registers for about `seconds`, in ops/s (2 per
// multiply-add), summed. 0 when !amx_usable() (isa.h).
double amx_int8_peak_ops_per_s(int threads, double seconds = 0.1);

// ---- Weights repacked at load for the decode kernels (layouts: gemm/repack.h) -------

// Whether matmul repacks weights at load (model load reads it; `--no-repack` clears it),
// process-wide like the matmul mode. On by default.
void set_weight_repack(bool enabled);
bool weight_repack_enabled();

// The layout the kernel table's entry for `type` on `isa` runs from, if it is not the
// type's own (Q4_K on avx512_vnni: Q4_K_R16).
std::optional<DType> repack_target(DType type, Isa isa);

// Bytes of n_out rows of n_in in a repacked layout (the rows rounded up to whole groups).
size_t repacked_bytes(DType repacked, int64_t n_in, int64_t n_out);

// Memory for repacked weights: 2 MiB-aligned and advised into transparent huge pages, so
// the load does not take a page fault per 4 KiB (nor the kernel zero them first
// through std::vector's value-initialization), and decode walks fewer TLB entries.
struct RepackedBytesFree {
  void operator()(uint8_t* p) const;
};
using RepackedBytes = std::unique_ptr<uint8_t, RepackedBytesFree>;
RepackedBytes allocate_repacked(size_t bytes);  // throws ridge::Error when out of memory

// Writes w's rows in the layout `repacked` (repack_target of w.dtype) to dst
// (repacked_bytes of them; 64-byte aligned for the kernels' loads) and returns the matrix
// over dst: same shape, row_bytes the source type's dense row; on `pool`'s threads when
// given. Throws ridge::Error when w cannot be repacked as `repacked`.
WeightMatrix repack(const WeightMatrix& w, DType repacked, uint8_t* dst, ThreadPool* pool = nullptr);

// Reference for tests: dequantizes each row with the same to_float and accumulates in
// double. Allocates; single-threaded.
void matmul_reference(const WeightMatrix& w, const float* x, float* y, int64_t n_tokens);

}  // namespace ridge::kernels
