// FlashAttention-style attention of new query tokens over a paged KV cache: each item (up
// to 16 consecutive query tokens of a sequence, by the query heads that share one KV
// head) walks the sequence's keys once in steps of 64 aligned positions, keeping a
// running max and running sum per query row (online softmax). For f32 and f16 caches a step is a pair of
// small matrix products (AttentionTileStep: scores of the rows against the step's keys,
// then P * V) with register-blocked AVX-512 and AVX2 kernels; the causal and window
// masks touch only the steps a row partly sees; on CPUs with AMX-BF16 an f16 cache's
// steps run on the tile unit instead (attention_tile_step_amx, split bf16, tiles of up to
// 64 tokens), for every item. Decode is an item of one token; when
// items are fewer than threads, each GQA group's query heads are cut into parts. Keys are
// taken in chunks of 256 positions whose partial softmaxes merge in order, so when items
// are still fewer than threads the chunks of one item run on several threads. Every
// path runs the same step arithmetic per row, so a token's output has the same bits
// whatever tile, part or thread computed it (the AMX step is its own arithmetic, used for
// every item of the call, so this holds there too).
//
// The cache holds f32 (T = float), IEEE-half f16 (T = uint16_t, the bits), bf16, Q8_0 or
// Q4_0 K/V; the f16 steps widen 8 or 16 halves per load in registers (F16C) and run the
// f32 arithmetic on the widened values.
//
//   PagedKvLayer<float> kv{k_pool, v_pool, n_blocks, 16, n_kv_head, d_head};
//   AttentionSequence s{q, q_pos, n_q, block_table, n_kv, out};
//   attention(kv, {&s, 1}, n_head, {.scale = 1 / std::sqrt(float(d_head))}, pool, scratch);
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/quant_blocks.h"
#include "core/thread_pool.h"
#include "kernels/isa.h"
#include "kernels/scratch.h"

namespace ridge::kernels {

// A bf16 cache element: the high half of an f32's bits.
struct Bf16 {
  uint16_t bits;
};

// Values per stored unit of a cache of T: 1 for float, uint16_t (f16) and Bf16; a block of
// 32 for BlockQ8_0 and BlockQ4_0 (GGML's layouts: an f16 scale d, then 32 int8 values, or
// 16 bytes whose low nibbles are values 0..15 and high nibbles 16..31, each minus 8). A
// Q8_0/Q4_0 row holds d_head / 32 blocks per head, so d_head must be a multiple of 32.
// Strides and offsets into a cache of T count units, not values.
template <class T>
inline constexpr int64_t kKvValuesPerUnit = 1;
template <>
inline constexpr int64_t kKvValuesPerUnit<BlockQ8_0> = kQK8_0;
template <>
inline constexpr int64_t kKvValuesPerUnit<BlockQ4_0> = kQK4_0;

// One layer's K and V pools. T is the stored element type: float, uint16_t holding IEEE
// halves (an F16 cache), Bf16, BlockQ8_0 or BlockQ4_0.
template <class T>
struct PagedKvLayer {
  const T* k = nullptr;  // [n_blocks][block_size][n_kv_head][d_head]
  const T* v = nullptr;  // [n_blocks][block_size][n_kv_head][d_head]
  int64_t n_blocks = 0;
  int64_t block_size = 0;
  int64_t n_kv_head = 0;
  int64_t d_head = 0;
};

struct AttentionParams {
  float scale = 1.0f;    // multiplies q.k: 1/sqrt(d_head), or query_pre_attn_scalar^-0.5
  float softcap = 0.0f;  // > 0: score = tanh(score / softcap) * softcap, after scaling
  int64_t window = 0;    // > 0: sliding window, key j visible iff q_pos - j < window
};

// One sequence's new tokens. Logical cache token j has absolute position j and lives in
// block block_table[j / block_size], slot j % block_size. The new tokens' K/V are
// already written, so n_kv counts them.
struct AttentionSequence {
  const float* q = nullptr;           // [n_q][n_head][d_head]
  const int32_t* q_pos = nullptr;     // [n_q], each in [0, n_kv)
  int64_t n_q = 0;
  std::span<const int32_t> block_table;  // >= ceil(n_kv / block_size) ids; < 0: recycled
  int64_t n_kv = 0;
  float* out = nullptr;               // [n_q][n_head][d_head]
};

// Floats of per-thread scratch attention() needs for these shapes.
size_t attention_scratch_floats(int64_t n_head, int64_t n_kv_head, int64_t d_head,
                                int64_t block_size);

// Causal (key j <= q_pos) attention, with the optional sliding window, for every token of
// every sequence; parallel over (sequence, query token, KV head) items (cut into parts
// of the group's query heads when fewer than threads), or over their 256-key chunks when
// items are still fewer than threads (partials in scratch.shared_data(); without room
// there it stays per item). A token's output
// depends only on its own q and its sequence's cache, not on the rest of the batch.
// Throws ridge::Error for inconsistent shapes, a position outside [0, n_kv), a short
// block table, or a block id that is out of range or recycled (< 0) yet inside a
// query's window.
template <class T>
void attention(const PagedKvLayer<T>& kv, std::span<const AttentionSequence> sequences,
               int64_t n_head, const AttentionParams& params, ThreadPool& pool, Scratch& scratch);

// attention with the inner loops of a given ISA, one cpu_supports (throws ridge::Error
// otherwise): kScalar the scalar steps, kAvx2 and kAvxVnni the AVX2 steps, kAvx512Vnni and
// kAmxInt8 the AVX-512 steps, bf16 caches the per-row loops (AVX2 where the ISA has it),
// and kAmxInt8 f16 caches on the AMX step when attention_tile_amx_usable(d_head).
template <class T>
void attention_isa(const PagedKvLayer<T>& kv, std::span<const AttentionSequence> sequences, int64_t n_head,
                   const AttentionParams& params, ThreadPool& pool, Scratch& scratch, Isa isa);

// Per-row inner loops, scalar and AVX2 (attention/decode_avx2.cpp), for K/V rows of f32 or f16
// (uint16_t halves, widened exactly to float as they are read). attention() runs the
// tiled steps below for these caches; these loops define the arithmetic the bf16 loops
// follow (and the tests check them against it):
//  scores[r * score_stride + j] = scale * dot(q[r], k[j * row_stride]), r < n_rep, j < count
//  exp_sum: x[i] = exp(x[i] - max) for i < n, returns their sum
//  accumulate: acc[r * acc_stride + d] += p[r * p_stride + j] * v[j * row_stride + d]
// An f16 loop gives the bits its f32 twin gives on the widened rows.
void attention_scores_scalar(const float* q, int64_t n_rep, int64_t d_head, const float* k, int64_t row_stride,
                             int64_t count, float scale, float* scores, int64_t score_stride);
void attention_scores_scalar(const float* q, int64_t n_rep, int64_t d_head, const uint16_t* k, int64_t row_stride,
                             int64_t count, float scale, float* scores, int64_t score_stride);
void attention_scores_avx2(const float* q, int64_t n_rep, int64_t d_head, const float* k, int64_t row_stride,
                           int64_t count, float scale, float* scores, int64_t score_stride);
void attention_scores_avx2(const float* q, int64_t n_rep, int64_t d_head, const uint16_t* k, int64_t row_stride,
                           int64_t count, float scale, float* scores, int64_t score_stride);
float attention_exp_sum_scalar(float* x, int64_t n, float max);
float attention_exp_sum_avx2(float* x, int64_t n, float max);
void attention_accumulate_scalar(const float* p, int64_t p_stride, int64_t n_rep, const float* v, int64_t row_stride,
                                 int64_t count, int64_t d_head, float* acc, int64_t acc_stride);
void attention_accumulate_scalar(const float* p, int64_t p_stride, int64_t n_rep, const uint16_t* v,
                                 int64_t row_stride, int64_t count, int64_t d_head, float* acc, int64_t acc_stride);
void attention_accumulate_avx2(const float* p, int64_t p_stride, int64_t n_rep, const float* v, int64_t row_stride,
                               int64_t count, int64_t d_head, float* acc, int64_t acc_stride);
void attention_accumulate_avx2(const float* p, int64_t p_stride, int64_t n_rep, const uint16_t* v, int64_t row_stride,
                               int64_t count, int64_t d_head, float* acc, int64_t acc_stride);

// The inner loops over bf16 caches (attention_kv_quant*.cpp), with the signatures above;
// each value widened exactly as it is read. Each AVX2 loop gives the bits of its scalar
// twin.
void attention_scores_scalar(const float* q, int64_t n_rep, int64_t d_head, const Bf16* k, int64_t row_stride,
                             int64_t count, float scale, float* scores, int64_t score_stride);
void attention_scores_avx2(const float* q, int64_t n_rep, int64_t d_head, const Bf16* k, int64_t row_stride,
                           int64_t count, float scale, float* scores, int64_t score_stride);
void attention_accumulate_scalar(const float* p, int64_t p_stride, int64_t n_rep, const Bf16* v, int64_t row_stride,
                                 int64_t count, int64_t d_head, float* acc, int64_t acc_stride);
void attention_accumulate_avx2(const float* p, int64_t p_stride, int64_t n_rep, const Bf16* v, int64_t row_stride,
                               int64_t count, int64_t d_head, float* acc, int64_t acc_stride);

// One step of tiled attention (attention_tile*.cpp): the keys of one aligned window of
// kAttentionStepKeys positions (lane l is key window_start + l, its K and V rows at
// k_rows[l] and v_rows[l], null for a key of a block no row sees) against a tile of query
// rows, the heads [r0, r0 + n_heads) of a GQA group for n_tokens consecutive tokens (row
// i * n_heads + r), carrying each row's online softmax. Token i sees lanes
// [token_lane_begin[i], token_lane_end[i]) (empty: its rows are untouched); only lanes
// [lane_begin, lane_end), the union, are read. Per row that sees a lane, the arithmetic is
// fixed (the scalar step defines it and the SIMD steps give its bits):
//   s[l] = fma chain over d = 0.. of q[d] * k[l][d], from 0, times scale
//   softcap > 0: s[l] = tanh(s[l] / softcap) * softcap; lanes the row does not see: -inf
//   new_max = max(max, max_l s[l]); if it grew from a finite max: sum, acc *= e(max - new_max)
//   p[l] = e(s[l] - new_max) on the row's lanes, else 0; sum += ((S0 + S1) + S2) + S3
//   acc[d] = fma(p[l], v[l][d], acc[d]) for l = lane_begin .. lane_end - 1 in order (v = 0
//   for a null row)
// where e is attention_exp_poly and Sg, the sum of lanes 16g .. 16g + 15, adds p[i] +
// p[i + 8], then those i and i + 4, then (0 + 2) + (1 + 3). Neither the other rows nor the
// other lanes change a row's bits, so a token's output does not depend on its tile.
inline constexpr int kAttentionStepKeys = 64;

template <class T>
struct AttentionTileStep {
  const float* qt = nullptr;  // [d_head][qt_stride]: the rows' queries, transposed, zero past the rows
  int64_t qt_stride = 0;      // n_tokens * n_heads rounded up to a multiple of 16
  const float* q = nullptr;   // row i * n_heads + r at q + i * q_token_stride + r * d_head
  int64_t q_token_stride = 0;
  const BlockQ8_0* q8 = nullptr;  // Q8_0/Q4_0 K only: the rows quantized, [rows][d_head / 32]
  const uint8_t* q8t = nullptr;   // Q8_0/Q4_0 SIMD steps only: attention_quant_queries of q8
  const uint16_t* qa = nullptr;   // AMX step only: attention_amx_queries of the rows
  int64_t n_tokens = 0, n_heads = 0, d_head = 0;
  const T* const* k_rows = nullptr;  // [kAttentionStepKeys]: lane l's K row (d_head values), or null
  const T* const* v_rows = nullptr;  // likewise V
  // For the bf16 per-row loops, which take runs of consecutive rows within one
  // 16-lane group and one cache block: units from one position's row to the next, and
  // bit l set where lane l's key starts a cache block.
  int64_t row_stride = 0;
  uint64_t block_starts = 0;
  int lane_begin = 0, lane_end = 0;
  const int* token_lane_begin = nullptr;  // [n_tokens]
  const int* token_lane_end = nullptr;    // [n_tokens]
  float scale = 1.0f, softcap = 0.0f;
  float* acc = nullptr;   // [n_tokens * n_heads][d_head]
  float* max = nullptr;   // [n_tokens * n_heads]
  float* sum = nullptr;   // [n_tokens * n_heads]
  float* work = nullptr;  // attention_tile_work_floats(n_tokens * n_heads, d_head)
};

size_t attention_tile_work_floats(int64_t n_rows, int64_t d_head);

// The exp of the softmax (x <= 0 here): the Cephes-style polynomial every attention path
// shares (avx2_math.h's exp256 lane for lane), so scalar and SIMD steps agree bit for bit.
float attention_exp_poly(float x);

// The step over f32 and f16 caches: scalar (the definition), AVX2+FMA+F16C, and AVX-512F
// (attention/tile_avx512.cpp; call only when cpu_supports(Isa::kAvx512Vnni)). All give the
// same bits.
void attention_tile_step_scalar(const AttentionTileStep<float>& step);
void attention_tile_step_scalar(const AttentionTileStep<uint16_t>& step);
void attention_tile_step_avx2(const AttentionTileStep<float>& step);
void attention_tile_step_avx2(const AttentionTileStep<uint16_t>& step);
void attention_tile_step_avx512(const AttentionTileStep<float>& step);
void attention_tile_step_avx512(const AttentionTileStep<uint16_t>& step);

// The step over Q8_0 and Q4_0 caches: scalar (the definition), AVX2 and AVX-512 VNNI
// (attention/tile_avx2.cpp, attention/tile_avx512.cpp; call the latter only when
// cpu_supports(Isa::kAvx512Vnni)), which give its bits: per row that sees lane l, with
// the row's query quantized to Q8_0 blocks (st.q8),
//   s[l] = fma chain over blocks b of float(isum_b) * d_b, the first a plain product,
//          times scale; isum_b the exact integer dot of the query's block b with K's,
//          d_b = float(query block's d) * float(K block's d)
// and then as the f32 step, on V decoded exactly (float(q) * float(d)). The SIMD steps
// also take st.q8t, the same queries laid out once per item by attention_quant_queries:
//   [d_head / 4][round_up(rows, 16)] words of 4 bytes q + 128 (values 4w .. 4w + 3 of a
//   row), then [d_head / 32][round_up(rows, 16)] floats, each block's d; zero past the rows
// in attention_quant_queries_bytes(rows, d_head) bytes.
void attention_tile_step_scalar(const AttentionTileStep<BlockQ8_0>& step);
void attention_tile_step_scalar(const AttentionTileStep<BlockQ4_0>& step);
void attention_tile_step_avx2(const AttentionTileStep<BlockQ8_0>& step);
void attention_tile_step_avx2(const AttentionTileStep<BlockQ4_0>& step);
void attention_tile_step_avx512(const AttentionTileStep<BlockQ8_0>& step);
void attention_tile_step_avx512(const AttentionTileStep<BlockQ4_0>& step);
size_t attention_quant_queries_bytes(int64_t n_rows, int64_t d_head);
void attention_quant_queries(const BlockQ8_0* q8, int64_t n_rows, int64_t d_head, uint8_t* out);

// The step over f16 caches on the AMX tile unit (attention/tile_amx.cpp), in split bf16:
// each f32 operand x = hi + lo, hi = bf16(x), lo = bf16(x - hi) (nearest even; for the
// cache's f16 values hi is x truncated to bf16, and lo = x - hi exactly), products
// summed by tdpbf16ps into f32 tiles. Per row (independent of the other rows, the lanes
// outside the row's range and the tile config, so a token's output still has the same
// bits whatever tile, part or thread computed it):
//   s[l] = tile sums over d of k[l][d] * qs[d], qs = scale * q, per 32 values of d in
//          order: k_hi qs_hi, k_lo qs_hi, k_hi qs_lo (an f16 k is exact in hi + lo)
//   softcap > 0: s[l] = tanh(s[l] / softcap) * softcap; lanes the row does not see: -inf
//   new_max = max(max, max_l s[l]); c = e(max - new_max)
//   p[l] = e(s[l] - new_max) on the row's lanes, else 0; sum = sum * c + ((S0 + S1) + S2) + S3
//   pv[d] = tile sums over l of p[l] * v[l][d] from 0, per 32 lanes in order: p_hi v_hi,
//           p_hi v_lo, p_lo v_hi (zeros for lanes outside the step's range or null rows)
//   acc[d] = fma(acc[d], c, pv[d])
// with Sg as for the other steps and e the step's own exp (2^n * a degree-6 polynomial
// of 2^f, about 1e-6 relative). Not the scalar step's bits: a product is good to about
// 2^-16 of |q||k| (f32: 2^-24). The rows' queries come
// prepared once per item by attention_amx_queries, as the B operand of the scores:
//   qb: [2][d_head / 2][round_up(rows, 16)][2] bf16, hi parts then lo parts; element
//   (p, row, j) is scale * q[2p + j] of row i * n_heads + r (at q + i * q_token_stride
//   + r * d_head); zero past the rows
// With more than 16 rows, the AMX step keeps acc transposed per group of 16 rows
// between its steps (rows 16 g .. 16 g + n - 1 hold acc[d][r] at acc + 16 g d_head +
// d n + r); after the last step of the rows, attention_tile_finish_amx (same step
// arguments) puts it back in the order above (with 16 rows or fewer it does nothing).
// acc starts at zeros in either order.
// Call only when attention_tile_amx_usable(d_head): AMX-BF16 with the tile permission
// (cpu_supports(Isa::kAmxInt8)), and d_head a multiple of 64.
bool attention_tile_amx_usable(int64_t d_head);
void attention_amx_queries(const float* q, int64_t q_token_stride, int64_t n_tokens, int64_t n_heads, int64_t d_head,
                           float scale, uint16_t* qb);
void attention_tile_step_amx(const AttentionTileStep<uint16_t>& step);
void attention_tile_finish_amx(const AttentionTileStep<uint16_t>& step);

// K/V rows written into an f16 cache: dst[i] = fp32_to_fp16(src[i]), rounded to nearest
// even (NaN payloads unspecified). kv_row_to_f16 picks the AVX2+F16C version when the
// CPU has it.
void kv_row_to_f16(const float* src, uint16_t* dst, int64_t n);
void kv_row_to_f16_scalar(const float* src, uint16_t* dst, int64_t n);
void kv_row_to_f16_avx2(const float* src, uint16_t* dst, int64_t n);

// Reference for tests: materializes each score row over a dense cache and accumulates
// in double. Allocates; single-threaded.
//   q, out: [n_q][n_head][d_head]   k, v: [n_kv][n_kv_head][d_head]   q_pos: [n_q]
void attention_reference(const float* q, const int32_t* q_pos, int64_t n_q, int64_t n_head,
                         const float* k, const float* v, int64_t n_kv, int64_t n_kv_head,
                         int64_t d_head, const AttentionParams& params, float* out);

#define RIDGE_ATTENTION_EXTERN(T)                                                                           \
  extern template void attention<T>(const PagedKvLayer<T>&, std::span<const AttentionSequence>, int64_t,       \
                                    const AttentionParams&, ThreadPool&, Scratch&);                            \
  extern template void attention_isa<T>(const PagedKvLayer<T>&, std::span<const AttentionSequence>, int64_t,   \
                                        const AttentionParams&, ThreadPool&, Scratch&, Isa);
RIDGE_ATTENTION_EXTERN(float)
RIDGE_ATTENTION_EXTERN(uint16_t)
RIDGE_ATTENTION_EXTERN(Bf16)
RIDGE_ATTENTION_EXTERN(BlockQ8_0)
RIDGE_ATTENTION_EXTERN(BlockQ4_0)
#undef RIDGE_ATTENTION_EXTERN

}  // namespace ridge::kernels
