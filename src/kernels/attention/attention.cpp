#include "kernels/attention/attention.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "kernels/ops/dot.h"
#include "kernels/gemm/table.h"
#include "kernels/prefetch.h"

namespace ridge::kernels {

namespace {

// Keys are taken in chunks aligned to multiples of kChunkKeys positions. Each chunk gives
// a partial softmax (max, sum, unnormalized output) and the partials are merged in
// position order. The arithmetic depends only on the query's position and window, so
// splitting one query's chunks over threads (decode of one sequence) gives the same bits
// as computing them in a row (a batch): a token's output does not depend on the batch.
constexpr int64_t kChunkKeys = 256;

// Shapes shared by every item of one attention() call.
struct Shape {
  int64_t n_head, n_kv_head, n_rep, d_head, block_size, n_blocks;
};

// Tiles: a sequence's consecutive query tokens (a prefill chunk, a speculative step's
// drafts) processed together per KV head, so each K/V block is read once for all of
// them and the scores and P * V are small matrix products (AttentionTileStep). A single
// token is a tile of one, so every token goes through the same steps whatever tile it
// is in, and its output has the same bits. The AMX step takes tiles of up to 64 tokens:
// its per-step cost is dominated by reading and splitting the step's K/V rows, which a
// bigger tile shares among more rows (kMaxTileTokens sizes the scratch for either).
constexpr int64_t kSimdTileTokens = 16;
constexpr int64_t kMaxTileTokens = 64;

// Partial (or running) softmax states of rows (tokens x heads of a group).
struct Partial {
  float* acc;  // [rows][d_head] unnormalized output
  float* max;  // [rows] running max
  float* sum;  // [rows] running sum of exp(score - max)
};

int64_t max_rows(const Shape& s) { return kMaxTileTokens * s.n_rep; }
// Rows of a tile's transposed queries, padded to whole vectors.
int64_t qt_stride(int64_t n_rows) { return (n_rows + 15) / 16 * 16; }
size_t partial_floats(int64_t rows, const Shape& s) { return static_cast<size_t>(rows * (s.d_head + 2)); }

Partial partial_at(float* base, int64_t rows, const Shape& s) {
  return Partial{base, base + rows * s.d_head, base + rows * s.d_head + rows};
}

// The states from row `row` on.
Partial rows_from(const Partial& p, int64_t row, const Shape& s) {
  return Partial{p.acc + row * s.d_head, p.max + row, p.sum + row};
}

void clear(const Partial& p, const Shape& s, int64_t n_rows) {
  std::fill(p.acc, p.acc + n_rows * s.d_head, 0.0f);
  std::fill(p.max, p.max + n_rows, -INFINITY);
  std::fill(p.sum, p.sum + n_rows, 0.0f);
}

// Per-thread scratch: a tile's running totals and one chunk's partials, its queries
// transposed, and the step's work space.
struct TileScratch {
  Partial total, chunk;
  float* qt;    // [d_head][rows]
  float* work;  // attention_tile_work_floats(rows, d_head)
};

TileScratch carve(float* base, const Shape& s) {
  const int64_t rows = max_rows(s);
  TileScratch it;
  it.total = partial_at(base, rows, s);
  it.chunk = partial_at(base + partial_floats(rows, s), rows, s);
  it.qt = base + 2 * partial_floats(rows, s);
  it.work = it.qt + qt_stride(rows) * s.d_head;
  return it;
}

void check_sequence(const AttentionSequence& seq, size_t index, const Shape& s) {
  if (seq.n_q == 0) return;
  if (seq.n_q < 0 || seq.q == nullptr || seq.q_pos == nullptr || seq.out == nullptr)
    throw Error(str_cat("attention: sequence ", index, " has n_q ", seq.n_q, " or null q/q_pos/out"));
  const int64_t blocks_needed = (seq.n_kv + s.block_size - 1) / s.block_size;
  if (seq.n_kv <= 0 || static_cast<int64_t>(seq.block_table.size()) < blocks_needed)
    throw Error(str_cat("attention: sequence ", index, " has n_kv ", seq.n_kv, " but a block table of ",
                        seq.block_table.size(), " entries (needs ", blocks_needed, ")"));
  for (int64_t t = 0; t < seq.n_q; ++t)
    if (seq.q_pos[t] < 0 || seq.q_pos[t] >= seq.n_kv)
      throw Error(str_cat("attention: sequence ", index, " query ", t, " has position ", seq.q_pos[t],
                          " outside the ", seq.n_kv, " cached tokens"));
}

// The per-row inner loops for K/V elements of type T, scalar or AVX2 (attention/decode_avx2.cpp,
// attention_kv_quant*.cpp): the step of the caches without a tiled one (bf16).
template <class T>
struct AttentionOps {
  void (*scores)(const float* q, int64_t n_rep, int64_t d_head, const T* k, int64_t row_stride, int64_t count,
                 float scale, float* scores, int64_t score_stride);
  float (*exp_sum)(float* x, int64_t n, float max);
  void (*accumulate)(const float* p, int64_t p_stride, int64_t n_rep, const T* v, int64_t row_stride, int64_t count,
                     int64_t d_head, float* acc, int64_t acc_stride);
};

template <class T>
AttentionOps<T> ops_for(Isa isa) {
  if (isa != Isa::kScalar) return {attention_scores_avx2, attention_exp_sum_avx2, attention_accumulate_avx2};
  return {attention_scores_scalar, attention_exp_sum_scalar, attention_accumulate_scalar};
}

// Q8_0 and Q4_0 K dot a query quantized to Q8_0 blocks.
template <class T>
constexpr bool kQuantizedQuery = std::is_same_v<T, BlockQ8_0> || std::is_same_v<T, BlockQ4_0>;

// A step from the per-row loops: per token, scores its lanes for its heads, rescales each
// head's state once for the lanes' max, and adds p * V over those lanes only.
template <class T, Isa kIsa>
void step_by_rows(const AttentionTileStep<T>& st) {
  const AttentionOps<T> ops = ops_for<T>(kIsa);
  constexpr int64_t kStride = 16;
  float* scores_rows = st.work;  // [n_heads][16]
  for (int64_t i = 0; i < st.n_tokens; ++i) {
    const int64_t row0 = i * st.n_heads;
    for (int l0 = st.token_lane_begin[i]; l0 < st.token_lane_end[i];) {
      int l1 = l0 + 1;  // the run [l0, l1): one 16-lane group, one cache block
      while (l1 < st.token_lane_end[i] && l1 % 16 != 0 && !(st.block_starts >> l1 & 1)) ++l1;
      const int64_t count = l1 - l0;
      const T* k = st.k_rows[l0];
      const T* v = st.v_rows[l0];
      l0 = l1;
      ops.scores(st.q + i * st.q_token_stride, st.n_heads, st.d_head, k, st.row_stride, count, st.scale, scores_rows,
                 kStride);
      for (int64_t r = 0; r < st.n_heads; ++r) {
        float* scores = scores_rows + r * kStride;
        float& max = st.max[row0 + r];
        if (st.softcap > 0)
          for (int64_t jj = 0; jj < count; ++jj) scores[jj] = std::tanh(scores[jj] / st.softcap) * st.softcap;
        float block_max = scores[0];
        for (int64_t jj = 1; jj < count; ++jj) block_max = std::max(block_max, scores[jj]);
        const float new_max = std::max(max, block_max);
        if (new_max > max) {
          const float correction = std::exp(max - new_max);  // 0 on the first block
          st.sum[row0 + r] *= correction;
          float* acc = st.acc + (row0 + r) * st.d_head;
          for (int64_t d = 0; d < st.d_head; ++d) acc[d] *= correction;
          max = new_max;
        }
        st.sum[row0 + r] += ops.exp_sum(scores, count, new_max);
      }
      ops.accumulate(scores_rows, kStride, st.n_heads, v, st.row_stride, count, st.d_head, st.acc + row0 * st.d_head,
                     st.d_head);
    }
  }
}

template <class T>
using TileStep = void (*)(const AttentionTileStep<T>&);

// The step every item of a call runs, and whether it takes its queries as the AMX step's
// split bf16 rows (attention_amx_queries) instead of transposed floats, or (Q8_0/Q4_0 on
// AVX2 and AVX-512) also laid out by attention_quant_queries.
template <class T>
struct StepKernel {
  TileStep<T> step;
  bool amx_queries = false;
  int64_t tile_tokens = kSimdTileTokens;  // most tokens per item
  bool quant_queries = false;
  TileStep<T> finish = nullptr;  // after an item's last step: acc back in row order
};

// Where attention_quant_queries' layout of an item's rows starts in the query buffer:
// after their Q8_0 rows, on a cache line.
size_t quant_queries_offset(int64_t n_rows, int64_t d_head) {
  const size_t q8_bytes = static_cast<size_t>(n_rows * (d_head / kQK8_0)) * sizeof(BlockQ8_0);
  return (q8_bytes + 63) / 64 * 64;
}

// f16 caches on an AMX-BF16 CPU (Isa::kAmxInt8, which has the tile permission) run the
// AMX step for every item, decode included, so a token's bits do not depend on its batch.
template <class T>
StepKernel<T> step_for(Isa isa, int64_t d_head) {
  if constexpr (std::is_same_v<T, uint16_t>) {
    if (isa == Isa::kAmxInt8 && attention_tile_amx_usable(d_head))
      return {attention_tile_step_amx, true, kMaxTileTokens, false, attention_tile_finish_amx};
  }
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, uint16_t>) {
    if (isa_has_avx512(isa)) return {attention_tile_step_avx512};
    if (isa_has_avx2(isa)) return {attention_tile_step_avx2};
    return {attention_tile_step_scalar};
  } else if constexpr (kQuantizedQuery<T>) {
    if (isa_has_avx512(isa)) return {attention_tile_step_avx512, false, kSimdTileTokens, true};
    if (isa_has_avx2(isa)) return {attention_tile_step_avx2, false, kSimdTileTokens, true};
    return {attention_tile_step_scalar};
  } else {
    return {isa_has_avx2(isa) ? step_by_rows<T, Isa::kAvx2> : step_by_rows<T, Isa::kScalar>};
  }
}

// Items are (sequence, tokens [t, t + n_t), kv head, query heads [r0, r0 + n_heads) of the
// group) in order. An item is usually the whole group; when items are fewer than threads
// (decode of one sequence over few KV heads) the group is cut into parts. Each head's
// arithmetic is the same either way, so the cut does not change any bits.
struct ItemRef {
  const AttentionSequence* seq;
  int64_t t, g, r0, n_heads;
  int64_t n_t = 1;
};

// Units of T in one cache row (all KV heads of one position), and the offset of KV head g
// in it.
template <class T>
int64_t unit_row_stride(const Shape& s) {
  return s.n_kv_head * s.d_head / kKvValuesPerUnit<T>;
}
template <class T>
int64_t unit_head_offset(const Shape& s, int64_t g) {
  return g * s.d_head / kKvValuesPerUnit<T>;
}
// Where key j's row of KV head g starts in a layer's K (or V) array, in units, when
// block `block` holds it.
template <class T>
int64_t key_row_at(const Shape& s, int32_t block, int64_t j, int64_t g) {
  return (static_cast<int64_t>(block) * s.block_size + j % s.block_size) * unit_row_stride<T>(s) +
         unit_head_offset<T>(s, g);
}

const float* query_of(const ItemRef& item, int64_t i, const Shape& s) {
  return item.seq->q + ((item.t + i) * s.n_head + item.g * s.n_rep + item.r0) * s.d_head;  // [n_heads][d_head]
}

// qt[d][i * n_heads + r] = the query of head r of token i; zero past the rows.
void transpose_queries(const ItemRef& item, const Shape& s, float* qt) {
  const int64_t n_rows = item.n_t * item.n_heads, stride = qt_stride(n_rows);
  std::fill(qt, qt + s.d_head * stride, 0.0f);
  for (int64_t i = 0; i < item.n_t; ++i) {
    const float* q = query_of(item, i, s);
    for (int64_t r = 0; r < item.n_heads; ++r)
      for (int64_t d = 0; d < s.d_head; ++d) qt[d * stride + i * item.n_heads + r] = q[r * s.d_head + d];
  }
}

// The item's queries as its steps take them, into `buffer` (a TileScratch's qt): split
// bf16 rows for the AMX step (they fit: 2 x 2 bytes per float of qt), transposed for the
// other tiled steps, quantized to Q8_0 rows for Q8_0/Q4_0 K, nothing for bf16.
template <class T>
void prepare_queries(const ItemRef& item, const Shape& s, const StepKernel<T>& kernel, float scale, float* buffer) {
  if (kernel.amx_queries) {
    attention_amx_queries(query_of(item, 0, s), s.n_head * s.d_head, item.n_t, item.n_heads, s.d_head, scale,
                          reinterpret_cast<uint16_t*>(buffer));
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, uint16_t>) {
    transpose_queries(item, s, buffer);
  } else if constexpr (kQuantizedQuery<T>) {
    auto* q8 = reinterpret_cast<BlockQ8_0*>(buffer);  // fits: 34 bytes per 32 values, qt has 128
    for (int64_t i = 0; i < item.n_t; ++i)
      quantize_row_q8_0(query_of(item, i, s), q8 + i * item.n_heads * (s.d_head / kQK8_0), item.n_heads * s.d_head);
    const int64_t n_rows = item.n_t * item.n_heads;
    if (kernel.quant_queries)
      attention_quant_queries(q8, n_rows, s.d_head,
                              reinterpret_cast<uint8_t*>(buffer) + quant_queries_offset(n_rows, s.d_head));
  }
}

// Keys [j0, j1) of KV head g: their K and V rows' lines into L2. chunk_partial asks for
// the next step's keys before each step. A decode reads each key once, from memory: its
// head's rows are every other 128 bytes of a block's 4 KiB page (the KV heads interleave
// per token), and blocks need not be adjacent, so the hardware prefetcher barely starts
// before a page ends; the step found its rows missing when it packed them.
template <class T>
void prefetch_key_rows(const PagedKvLayer<T>& kv, const AttentionSequence& seq, const Shape& s, int64_t g, int64_t j0,
                       int64_t j1) {
  const int64_t row_stride = unit_row_stride<T>(s);
  const size_t bytes = static_cast<size_t>(s.d_head / kKvValuesPerUnit<T>) * sizeof(T);
  const size_t row_bytes = static_cast<size_t>(row_stride) * sizeof(T);
  for (int64_t j = j0; j < j1;) {
    const int64_t table_index = j / s.block_size, run_end = std::min(j1, (table_index + 1) * s.block_size);
    const int32_t block = seq.block_table[static_cast<size_t>(table_index)];
    if (block >= 0 && block < s.n_blocks) {
      const int64_t at = key_row_at<T>(s, block, j, g);
      const char* k = reinterpret_cast<const char*>(kv.k + at);
      const char* v = reinterpret_cast<const char*>(kv.v + at);
      for (int64_t r = j; r < run_end; ++r, k += row_bytes, v += row_bytes)
        for (size_t o = 0; o < bytes; o += 64) {
          prefetch_l2(k + o);
          prefetch_l2(v + o);
        }
    }
    j = run_end;
  }
}

// The item's tokens over the keys of one chunk, token i over [begin[i], end[i]) (possibly
// empty): walks the keys in steps of kAttentionStepKeys aligned positions (so a key's lane
// does not depend on the tile), skipping those no token sees. `out` is cleared first.
// Keys before keys_end past the chunk are the same thread's next: their rows are
// prefetched too.
template <class T>
void chunk_partial(const PagedKvLayer<T>& kv, const ItemRef& item, const Shape& s, const AttentionParams& params,
                   const int64_t* begin, const int64_t* end, const Partial& out, const float* qt, float* work,
                   const StepKernel<T>& kernel, int64_t keys_end) {
  const AttentionSequence& seq = *item.seq;
  const int64_t n_t = item.n_t, row_stride = unit_row_stride<T>(s);
  clear(out, s, n_t * item.n_heads);
  int64_t lo = INT64_MAX, hi = -1;
  for (int64_t i = 0; i < n_t; ++i)
    if (begin[i] < end[i]) lo = std::min(lo, begin[i]), hi = std::max(hi, end[i]);
  constexpr int64_t kStepKeys = kAttentionStepKeys;
  int lane_begin[kMaxTileTokens], lane_end[kMaxTileTokens];
  AttentionTileStep<T> st;
  st.qt = qt;
  st.qt_stride = qt_stride(n_t * item.n_heads);
  if constexpr (kQuantizedQuery<T>) {
    st.q8 = reinterpret_cast<const BlockQ8_0*>(qt);
    if (kernel.quant_queries)
      st.q8t = reinterpret_cast<const uint8_t*>(qt) + quant_queries_offset(n_t * item.n_heads, s.d_head);
  }
  if (kernel.amx_queries) st.qa = reinterpret_cast<const uint16_t*>(qt);
  st.q = query_of(item, 0, s);
  st.q_token_stride = s.n_head * s.d_head;
  st.n_tokens = n_t;
  st.n_heads = item.n_heads;
  st.d_head = s.d_head;
  st.row_stride = row_stride;
  st.token_lane_begin = lane_begin;
  st.token_lane_end = lane_end;
  st.scale = params.scale;
  st.softcap = params.softcap;
  st.acc = out.acc;
  st.max = out.max;
  st.sum = out.sum;
  st.work = work;
  const T* k_rows[kStepKeys];
  const T* v_rows[kStepKeys];
  st.k_rows = k_rows;
  st.v_rows = v_rows;
  for (int64_t w0 = lo / kStepKeys * kStepKeys; w0 < hi; w0 += kStepKeys) {
    int union_begin = kStepKeys, union_end = 0;
    for (int64_t i = 0; i < n_t; ++i) {
      const int64_t k0 = std::max(begin[i], w0), k1 = std::min(end[i], w0 + kStepKeys);
      lane_begin[i] = k0 < k1 ? static_cast<int>(k0 - w0) : 0;
      lane_end[i] = k0 < k1 ? static_cast<int>(k1 - w0) : 0;
      if (k0 < k1) union_begin = std::min(union_begin, lane_begin[i]), union_end = std::max(union_end, lane_end[i]);
    }
    if (union_begin >= union_end) continue;  // between two tokens' windows
    // The lanes' rows, block by block; a block no token sees (between two windows) may be
    // recycled, so its lanes stay null.
    st.block_starts = 0;
    for (int64_t j = w0 + union_begin; j < w0 + union_end;) {
      const int64_t table_index = j / s.block_size;
      const int64_t run_end = std::min(w0 + union_end, (table_index + 1) * s.block_size);
      const int l0 = static_cast<int>(j - w0), l1 = static_cast<int>(run_end - w0);
      if (j % s.block_size == 0) st.block_starts |= uint64_t{1} << l0;
      bool seen = false;
      for (int64_t i = 0; i < n_t && !seen; ++i) seen = lane_begin[i] < l1 && lane_end[i] > l0;
      const int32_t block = seq.block_table[static_cast<size_t>(table_index)];
      if (seen && (block < 0 || block >= s.n_blocks))
        throw Error(str_cat("attention: block table entry ", table_index, " is ", block, " but holds keys ", j, "..",
                            run_end - 1, " inside the window of position ", seq.q_pos[item.t + n_t - 1],
                            " (pool has ", s.n_blocks, " blocks)"));
      const int64_t first = key_row_at<T>(s, block, j, item.g);
      for (int l = l0; l < l1; ++l) {
        const int64_t at = first + (l - l0) * row_stride;
        k_rows[l] = seen ? kv.k + at : nullptr;
        v_rows[l] = seen ? kv.v + at : nullptr;
      }
      j = run_end;
    }
    st.lane_begin = union_begin;
    st.lane_end = union_end;
    if (w0 + kStepKeys < keys_end)
      prefetch_key_rows(kv, seq, s, item.g, w0 + kStepKeys, std::min(keys_end, w0 + 2 * kStepKeys));
    kernel.step(st);
  }
  if (kernel.finish) kernel.finish(st);
}

// total <- total (+) part, the online-softmax merge of two disjoint key ranges.
void merge(const Partial& total, const Partial& part, const Shape& s, int64_t n_rows) {
  for (int64_t r = 0; r < n_rows; ++r) {
    // One of the two is e^0 = 1, taken without calling exp (a prefill at depth merges
    // every kChunkKeys keys; expf was 2.4% of its AMX attention profile, now 1.7%).
    const float new_max = std::max(total.max[r], part.max[r]);
    const float a = total.max[r] == new_max ? 1.0f : std::exp(total.max[r] - new_max);  // 0 while total is empty
    const float b = part.max[r] == new_max ? 1.0f : std::exp(part.max[r] - new_max);
    total.sum[r] = total.sum[r] * a + part.sum[r] * b;
    float* acc = total.acc + r * s.d_head;
    const float* add = part.acc + r * s.d_head;
    for (int64_t d = 0; d < s.d_head; ++d) acc[d] = acc[d] * a + add[d] * b;
    total.max[r] = new_max;
  }
}

// Token i of the item from its rows of `total`.
void write_output(const Partial& total, const ItemRef& item, int64_t i, const Shape& s) {
  float* out = item.seq->out + ((item.t + i) * s.n_head + item.g * s.n_rep + item.r0) * s.d_head;
  const Partial rows = rows_from(total, i * item.n_heads, s);
  for (int64_t r = 0; r < item.n_heads; ++r) {
    const float inv_sum = 1.0f / rows.sum[r];  // sum >= 1: the max key contributes exp(0)
    for (int64_t d = 0; d < s.d_head; ++d) out[r * s.d_head + d] = rows.acc[r * s.d_head + d] * inv_sum;
  }
}

// The keys query t may see: [first, last].
void visible_keys(const AttentionSequence& seq, int64_t t, const AttentionParams& params, int64_t* first,
                  int64_t* last) {
  const int64_t pos = seq.q_pos[t];
  *first = params.window > 0 ? std::max<int64_t>(0, pos - params.window + 1) : 0;
  *last = pos;
}

// Chunk c of [first, last]: keys [max(first, c * kChunkKeys), min(last + 1, (c + 1) * kChunkKeys)).
void chunk_range(int64_t first, int64_t last, int64_t c, int64_t* begin, int64_t* end) {
  *begin = std::max(first, c * kChunkKeys);
  *end = std::min(last + 1, (c + 1) * kChunkKeys);
}

// One item (a tile, or a single token) on one thread: its chunks in order, each token's
// partial merged into its total as they come.
template <class T>
void attend_tile(const PagedKvLayer<T>& kv, const ItemRef& item, const Shape& s, const AttentionParams& params,
                 const TileScratch& it, const StepKernel<T>& kernel) {
  const int64_t n_t = item.n_t, n_heads = item.n_heads;
  int64_t first[kMaxTileTokens], last[kMaxTileTokens], lo = INT64_MAX, hi = -1;
  for (int64_t i = 0; i < n_t; ++i) {
    visible_keys(*item.seq, item.t + i, params, &first[i], &last[i]);
    lo = std::min(lo, first[i]);
    hi = std::max(hi, last[i]);
  }
  prepare_queries<T>(item, s, kernel, params.scale, it.qt);
  clear(it.total, s, n_t * n_heads);
  for (int64_t c = lo / kChunkKeys; c <= hi / kChunkKeys; ++c) {
    int64_t begin[kMaxTileTokens], end[kMaxTileTokens];
    bool any = false;
    for (int64_t i = 0; i < n_t; ++i) {
      chunk_range(first[i], last[i], c, &begin[i], &end[i]);
      any = any || begin[i] < end[i];
    }
    if (!any) continue;
    chunk_partial(kv, item, s, params, begin, end, it.chunk, it.qt, it.work, kernel, hi + 1);
    for (int64_t i = 0; i < n_t; ++i)
      if (begin[i] < end[i])  // this token sees chunk c
        merge(rows_from(it.total, i * n_heads, s), rows_from(it.chunk, i * n_heads, s), s, n_heads);
  }
  for (int64_t i = 0; i < n_t; ++i) write_output(it.total, item, i, s);
}

// Few items and long contexts (decode of one or two sequences): the chunks of every item
// are spread over the threads, their partials kept in the shared scratch, then merged.
constexpr int64_t kMaxSplitItems = 16;

}  // namespace

size_t attention_scratch_floats(int64_t n_head, int64_t n_kv_head, int64_t d_head, int64_t block_size) {
  const int64_t n_rep = n_kv_head > 0 ? n_head / n_kv_head : n_head;
  // A tile's totals and chunk partials, its transposed queries, and the step's work.
  const int64_t rows = kMaxTileTokens * n_rep;
  return static_cast<size_t>(rows * 2 * (d_head + 2) + (rows + 15) / 16 * 16 * d_head) +
         attention_tile_work_floats(rows, d_head);
}

template <class T>
void attention_isa(const PagedKvLayer<T>& kv, std::span<const AttentionSequence> sequences, int64_t n_head,
                   const AttentionParams& params, ThreadPool& pool, Scratch& scratch, Isa isa) {
  if (kv.k == nullptr || kv.v == nullptr || kv.n_blocks <= 0 || kv.block_size <= 0 ||
      kv.n_kv_head <= 0 || kv.d_head <= 0 || n_head <= 0 || n_head % kv.n_kv_head != 0)
    throw Error(str_cat("attention: bad shapes: n_head ", n_head, ", n_kv_head ", kv.n_kv_head, ", d_head ",
                        kv.d_head, ", block_size ", kv.block_size, ", n_blocks ", kv.n_blocks));
  if (kv.d_head % kKvValuesPerUnit<T> != 0)
    throw Error(str_cat("attention: d_head ", kv.d_head, " is not a multiple of the cache's block of ",
                        kKvValuesPerUnit<T>, " values"));
  require_isa(isa, "attention");
  const Shape s{n_head, kv.n_kv_head, n_head / kv.n_kv_head, kv.d_head, kv.block_size, kv.n_blocks};
  scratch.require(pool.n_threads(), attention_scratch_floats(n_head, kv.n_kv_head, kv.d_head, kv.block_size),
                  "attention");
  int64_t n_groups = 0;  // (sequence, token, kv head) triples
  for (size_t i = 0; i < sequences.size(); ++i) {
    check_sequence(sequences[i], i, s);
    n_groups += std::max<int64_t>(0, sequences[i].n_q) * s.n_kv_head;
  }
  const int64_t n_threads = pool.n_threads();
  const StepKernel<T> kernel = step_for<T>(isa, s.d_head);
  // Tiles when the tokens alone give every thread work: as long as the tiles still do.
  int64_t tile = 1;
  auto n_tile_items = [&](int64_t size) {
    int64_t n = 0;
    for (const AttentionSequence& seq : sequences) n += (std::max<int64_t>(0, seq.n_q) + size - 1) / size * s.n_kv_head;
    return n;
  };
  if (n_groups >= n_threads) {
    tile = kernel.tile_tokens;
    while (tile > 1 && n_tile_items(tile) < n_threads) tile /= 2;
  }
  if (tile > 1) {
    const int64_t n_items = n_tile_items(tile);
    auto tile_at = [&](int64_t item) {
      size_t seq_index = 0;
      for (;;) {
        const int64_t seq_items = (std::max<int64_t>(0, sequences[seq_index].n_q) + tile - 1) / tile * s.n_kv_head;
        if (item < seq_items) break;
        item -= seq_items;
        ++seq_index;
      }
      const AttentionSequence& seq = sequences[seq_index];
      const int64_t t = item / s.n_kv_head * tile;
      return ItemRef{&seq, t, item % s.n_kv_head, 0, s.n_rep, std::min(tile, seq.n_q - t)};
    };
    pool.parallel_for_dynamic(n_items, 1, [&](int64_t begin, int64_t end, int thread) {
      const TileScratch it = carve(scratch.thread_data(thread), s);
      for (int64_t i = begin; i < end; ++i) attend_tile(kv, tile_at(i), s, params, it, kernel);
    });
    return;
  }
  // Group `group` of the call: its sequence, token and KV head.
  auto group_at = [&](int64_t group) {
    size_t seq_index = 0;
    for (;;) {
      const int64_t seq_groups = std::max<int64_t>(0, sequences[seq_index].n_q) * s.n_kv_head;
      if (group < seq_groups) break;
      group -= seq_groups;
      ++seq_index;
    }
    return ItemRef{&sequences[seq_index], group / s.n_kv_head, group % s.n_kv_head, 0, s.n_rep};
  };
  // Fewer groups than threads, and too few key chunks to go round (short contexts): cut
  // each group's query heads into parts. Chunks are preferred when there are enough:
  // each thread then reads only its share of K/V, where a part reads all of it.
  int64_t n_parts = 1;
  if (n_groups > 0 && n_groups < n_threads) {
    int64_t n_chunks = 0;
    for (int64_t group = 0; group < n_groups; ++group) {
      const ItemRef item = group_at(group);
      int64_t first, last;
      visible_keys(*item.seq, item.t, params, &first, &last);
      n_chunks += last / kChunkKeys - first / kChunkKeys + 1;
    }
    if (n_chunks < n_threads) n_parts = std::min(s.n_rep, (n_threads + n_chunks - 1) / n_chunks);
  }
  const int64_t n_items = n_groups * n_parts;
  auto item_at = [&](int64_t item) {
    ItemRef ref = group_at(item / n_parts);
    const int64_t part = item % n_parts;
    ref.r0 = s.n_rep * part / n_parts;
    ref.n_heads = s.n_rep * (part + 1) / n_parts - ref.r0;
    return ref;
  };

  // Split path: fewer items than threads, more chunks than items, and room for the partials.
  if (n_items > 0 && n_items < n_threads && n_items <= kMaxSplitItems) {
    ItemRef items[kMaxSplitItems];
    int64_t first_chunk[kMaxSplitItems], unit_begin[kMaxSplitItems + 1];
    unit_begin[0] = 0;
    for (int64_t i = 0; i < n_items; ++i) {
      items[i] = item_at(i);
      int64_t first, last;
      visible_keys(*items[i].seq, items[i].t, params, &first, &last);
      first_chunk[i] = first / kChunkKeys;
      unit_begin[i + 1] = unit_begin[i] + last / kChunkKeys - first_chunk[i] + 1;
    }
    const int64_t n_units = unit_begin[n_items];
    const size_t unit_floats = partial_floats(s.n_rep, s);
    const size_t needed = static_cast<size_t>(n_units) * unit_floats * sizeof(float);
    if (n_units > n_items && needed <= scratch.shared_bytes()) {
      float* partials = reinterpret_cast<float*>(scratch.shared_data());
      // Each thread walks its own run of chunks in order (stealing from the far end of
      // the others' when done), so the keys it prefetches past a chunk are its next.
      pool.parallel_for_stealing(n_units, 1, [&](int64_t begin, int64_t end, int thread) {
        const TileScratch it = carve(scratch.thread_data(thread), s);
        for (int64_t u = begin; u < end; ++u) {
          int64_t i = 0;
          while (u >= unit_begin[i + 1]) ++i;
          int64_t first, last, k_begin, k_end;
          visible_keys(*items[i].seq, items[i].t, params, &first, &last);
          chunk_range(first, last, first_chunk[i] + (u - unit_begin[i]), &k_begin, &k_end);
          prepare_queries<T>(items[i], s, kernel, params.scale, it.qt);
          chunk_partial(kv, items[i], s, params, &k_begin, &k_end,
                        partial_at(partials + u * unit_floats, items[i].n_heads, s), it.qt, it.work, kernel,
                        last + 1);
        }
      });
      const TileScratch it = carve(scratch.thread_data(0), s);
      for (int64_t i = 0; i < n_items; ++i) {
        clear(it.total, s, items[i].n_heads);
        for (int64_t u = unit_begin[i]; u < unit_begin[i + 1]; ++u)
          merge(it.total, partial_at(partials + u * unit_floats, items[i].n_heads, s), s, items[i].n_heads);
        write_output(it.total, items[i], 0, s);
      }
      return;
    }
  }

  // Item costs grow with the position, so threads take them one at a time.
  pool.parallel_for_dynamic(n_items, 1, [&](int64_t begin, int64_t end, int thread) {
    const TileScratch it = carve(scratch.thread_data(thread), s);
    for (int64_t item = begin; item < end; ++item) attend_tile(kv, item_at(item), s, params, it, kernel);
  });
}

template <class T>
void attention(const PagedKvLayer<T>& kv, std::span<const AttentionSequence> sequences, int64_t n_head,
               const AttentionParams& params, ThreadPool& pool, Scratch& scratch) {
  attention_isa(kv, sequences, n_head, params, pool, scratch, best_isa());
}

#define RIDGE_ATTENTION_FOR(T)                                                                              \
  template void attention<T>(const PagedKvLayer<T>&, std::span<const AttentionSequence>, int64_t,              \
                             const AttentionParams&, ThreadPool&, Scratch&);                                   \
  template void attention_isa<T>(const PagedKvLayer<T>&, std::span<const AttentionSequence>, int64_t,          \
                                 const AttentionParams&, ThreadPool&, Scratch&, Isa);
RIDGE_ATTENTION_FOR(float)
RIDGE_ATTENTION_FOR(uint16_t)
RIDGE_ATTENTION_FOR(Bf16)
RIDGE_ATTENTION_FOR(BlockQ8_0)
RIDGE_ATTENTION_FOR(BlockQ4_0)
#undef RIDGE_ATTENTION_FOR

void attention_scores_scalar(const float* q, int64_t n_rep, int64_t d_head, const float* k, int64_t row_stride,
                             int64_t count, float scale, float* scores, int64_t score_stride) {
  for (int64_t j = 0; j < count; ++j)
    for (int64_t r = 0; r < n_rep; ++r)
      scores[r * score_stride + j] = dot_f32_scalar(q + r * d_head, k + j * row_stride, d_head) * scale;
}

// The f16 twin of dot_f32_scalar (same four accumulators, same order), so scalar scores
// over an f16 cache have the bits of scalar scores over its widened values.
void attention_scores_scalar(const float* q, int64_t n_rep, int64_t d_head, const uint16_t* k, int64_t row_stride,
                             int64_t count, float scale, float* scores, int64_t score_stride) {
  for (int64_t j = 0; j < count; ++j) {
    const uint16_t* kj = k + j * row_stride;
    for (int64_t r = 0; r < n_rep; ++r) {
      const float* a = q + r * d_head;
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t i = 0;
      for (; i + 4 <= d_head; i += 4) {
        s0 += a[i] * fp16_to_fp32(kj[i]);
        s1 += a[i + 1] * fp16_to_fp32(kj[i + 1]);
        s2 += a[i + 2] * fp16_to_fp32(kj[i + 2]);
        s3 += a[i + 3] * fp16_to_fp32(kj[i + 3]);
      }
      for (; i < d_head; ++i) s0 += a[i] * fp16_to_fp32(kj[i]);
      scores[r * score_stride + j] = ((s0 + s1) + (s2 + s3)) * scale;
    }
  }
}

float attention_exp_sum_scalar(float* x, int64_t n, float max) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  return sum;
}

void attention_accumulate_scalar(const float* p, int64_t p_stride, int64_t n_rep, const float* v,
                                 int64_t row_stride, int64_t count, int64_t d_head, float* acc, int64_t acc_stride) {
  for (int64_t j = 0; j < count; ++j)
    for (int64_t r = 0; r < n_rep; ++r) axpy_f32(p[r * p_stride + j], v + j * row_stride, acc + r * acc_stride, d_head);
}

void attention_accumulate_scalar(const float* p, int64_t p_stride, int64_t n_rep, const uint16_t* v,
                                 int64_t row_stride, int64_t count, int64_t d_head, float* acc, int64_t acc_stride) {
  for (int64_t j = 0; j < count; ++j) {
    const uint16_t* vj = v + j * row_stride;
    for (int64_t r = 0; r < n_rep; ++r) {
      const float pj = p[r * p_stride + j];
      float* ar = acc + r * acc_stride;
      for (int64_t d = 0; d < d_head; ++d) ar[d] += pj * fp16_to_fp32(vj[d]);
    }
  }
}

void kv_row_to_f16_scalar(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

void kv_row_to_f16(const float* src, uint16_t* dst, int64_t n) {
  static const auto fn = isa_has_avx2(best_isa()) ? &kv_row_to_f16_avx2 : &kv_row_to_f16_scalar;
  fn(src, dst, n);
}

void attention_reference(const float* q, const int32_t* q_pos, int64_t n_q, int64_t n_head,
                         const float* k, const float* v, int64_t n_kv, int64_t n_kv_head,
                         int64_t d_head, const AttentionParams& params, float* out) {
  const int64_t n_rep = n_head / n_kv_head;
  std::vector<double> scores(static_cast<size_t>(n_kv));
  std::vector<double> acc(static_cast<size_t>(d_head));
  for (int64_t t = 0; t < n_q; ++t) {
    const int64_t pos = q_pos[t];
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t g = h / n_rep;
      const float* qh = q + (t * n_head + h) * d_head;
      double max_score = -INFINITY;
      for (int64_t j = 0; j < n_kv; ++j) {
        const bool visible = j <= pos && (params.window <= 0 || pos - j < params.window);
        if (!visible) {
          scores[j] = -INFINITY;
          continue;
        }
        double dot = 0;
        for (int64_t d = 0; d < d_head; ++d)
          dot += static_cast<double>(qh[d]) * k[(j * n_kv_head + g) * d_head + d];
        double score = dot * params.scale;
        if (params.softcap > 0) score = std::tanh(score / params.softcap) * params.softcap;
        scores[j] = score;
        max_score = std::max(max_score, score);
      }
      double sum = 0;
      for (int64_t j = 0; j < n_kv; ++j) {
        scores[j] = std::exp(scores[j] - max_score);  // exp(-inf) = 0 for masked keys
        sum += scores[j];
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < n_kv; ++j)
        for (int64_t d = 0; d < d_head; ++d) acc[d] += scores[j] * v[(j * n_kv_head + g) * d_head + d];
      for (int64_t d = 0; d < d_head; ++d) out[(t * n_head + h) * d_head + d] = static_cast<float>(acc[d] / sum);
    }
  }
}

}  // namespace ridge::kernels
