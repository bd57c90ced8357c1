#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/dot.h"
#include "kernels/gemm.h"

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

// A partial (or running) softmax state for the heads of an item (at most n_rep).
struct Partial {
  float* acc;  // [n_rep][d_head] unnormalized output
  float* max;  // [n_rep] running max
  float* sum;  // [n_rep] running sum of exp(score - max)
};

size_t partial_floats(const Shape& s) { return static_cast<size_t>(s.n_rep * (s.d_head + 2)); }

Partial partial_at(float* base, const Shape& s) {
  return Partial{base, base + s.n_rep * s.d_head, base + s.n_rep * s.d_head + s.n_rep};
}

void clear(const Partial& p, const Shape& s, int64_t n_heads) {
  std::fill(p.acc, p.acc + n_heads * s.d_head, 0.0f);
  std::fill(p.max, p.max + n_heads, -INFINITY);
  std::fill(p.sum, p.sum + n_heads, 0.0f);
}

// Per-thread scratch carved for one item: the running total, one chunk's partial and one
// block's scores.
struct ItemScratch {
  Partial total;
  Partial chunk;
  float* scores;  // [n_rep][block_size]
};

ItemScratch carve(float* base, const Shape& s) {
  ItemScratch it;
  it.total = partial_at(base, s);
  it.chunk = partial_at(base + partial_floats(s), s);
  it.scores = base + 2 * partial_floats(s);
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

// The inner loops for K/V elements of type T, scalar or AVX2 (attention_avx2.cpp),
// chosen once per call.
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
  if (isa == Isa::kAvx2) return {attention_scores_avx2, attention_exp_sum_avx2, attention_accumulate_avx2};
  return {attention_scores_scalar, attention_exp_sum_scalar, attention_accumulate_scalar};
}

// Items are (sequence, token, kv head, query heads [r0, r0 + n_heads) of the group) in
// order. An item is usually the whole group; when items are fewer than threads (decode
// of one sequence over few KV heads) the group is cut into parts. Each head's arithmetic
// is the same either way, so the cut does not change any bits.
struct ItemRef {
  const AttentionSequence* seq;
  int64_t t, g, r0, n_heads;
  int64_t n_t = 1;  // tokens t .. t + n_t - 1 (a tile: see attend_tile)
};

// One block's count keys for n_heads query heads whose scores (rows of block_size floats)
// are computed: per head, rescales the running state once for the block's max (not once
// per key) and turns the scores into exp(score - max), then adds p * V. Both attention
// paths (per token, per tile) call it with the same keys, so they agree bit for bit.
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

template <class T>
void add_block(const T* v_rows, int64_t count, float* scores_rows, int64_t n_heads,
               const Shape& s, const AttentionParams& params, const Partial& out, const AttentionOps<T>& ops) {
  const int64_t row_stride = unit_row_stride<T>(s);
  for (int64_t r = 0; r < n_heads; ++r) {
    float* scores = scores_rows + r * s.block_size;
    if (params.softcap > 0)
      for (int64_t jj = 0; jj < count; ++jj) scores[jj] = std::tanh(scores[jj] / params.softcap) * params.softcap;
    float block_max = scores[0];
    for (int64_t jj = 1; jj < count; ++jj) block_max = std::max(block_max, scores[jj]);
    const float new_max = std::max(out.max[r], block_max);
    if (new_max > out.max[r]) {
      const float correction = std::exp(out.max[r] - new_max);  // 0 on the first block
      out.sum[r] *= correction;
      float* acc = out.acc + r * s.d_head;
      for (int64_t d = 0; d < s.d_head; ++d) acc[d] *= correction;
      out.max[r] = new_max;
    }
    out.sum[r] += ops.exp_sum(scores, count, new_max);
  }
  ops.accumulate(scores_rows, s.block_size, n_heads, v_rows, row_stride, count, s.d_head, out.acc, s.d_head);
}

// One item over the keys of one chunk, [j_begin, j_end): walks them block by block; per
// block, scores all keys, rescales the accumulators once (not once per key) and adds
// p * V. `out` is cleared first.
template <class T>
void chunk_partial(const PagedKvLayer<T>& kv, const ItemRef& item, const Shape& s, const AttentionParams& params,
                   int64_t j_begin, int64_t j_end, const Partial& out, const ItemScratch& it,
                   const AttentionOps<T>& ops) {
  const AttentionSequence& seq = *item.seq;
  const int64_t t = item.t, g = item.g, n_heads = item.n_heads;
  const int64_t pos = seq.q_pos[t];
  const int64_t row_stride = unit_row_stride<T>(s);
  const float* q = seq.q + (t * s.n_head + g * s.n_rep + item.r0) * s.d_head;  // [n_heads][d_head]
  clear(out, s, n_heads);

  for (int64_t j0 = j_begin; j0 < j_end;) {
    const int64_t table_index = j0 / s.block_size;
    const int64_t j1 = std::min(j_end, (table_index + 1) * s.block_size);
    const int64_t count = j1 - j0;
    const int32_t block = seq.block_table[static_cast<size_t>(table_index)];
    if (block < 0 || block >= s.n_blocks)
      throw Error(str_cat("attention: block table entry ", table_index, " is ", block,
                          " but holds keys ", j0, "..", j1 - 1, " inside the window of position ", pos,
                          " (pool has ", s.n_blocks, " blocks)"));
    const int64_t first_row = (static_cast<int64_t>(block) * s.block_size + j0 % s.block_size);
    const T* k_rows = kv.k + first_row * row_stride + unit_head_offset<T>(s, g);
    const T* v_rows = kv.v + first_row * row_stride + unit_head_offset<T>(s, g);

    ops.scores(q, n_heads, s.d_head, k_rows, row_stride, count, params.scale, it.scores, s.block_size);
    add_block(v_rows, count, it.scores, n_heads, s, params, out, ops);
    j0 = j1;
  }
}

// total <- total (+) part, the online-softmax merge of two disjoint key ranges.
void merge(const Partial& total, const Partial& part, const Shape& s, int64_t n_heads) {
  for (int64_t r = 0; r < n_heads; ++r) {
    const float new_max = std::max(total.max[r], part.max[r]);
    const float a = std::exp(total.max[r] - new_max);  // 0 while total is empty
    const float b = std::exp(part.max[r] - new_max);
    total.sum[r] = total.sum[r] * a + part.sum[r] * b;
    float* acc = total.acc + r * s.d_head;
    const float* add = part.acc + r * s.d_head;
    for (int64_t d = 0; d < s.d_head; ++d) acc[d] = acc[d] * a + add[d] * b;
    total.max[r] = new_max;
  }
}

void write_output(const Partial& total, const ItemRef& item, const Shape& s) {
  float* out = item.seq->out + (item.t * s.n_head + item.g * s.n_rep + item.r0) * s.d_head;
  for (int64_t r = 0; r < item.n_heads; ++r) {
    const float inv_sum = 1.0f / total.sum[r];  // sum >= 1: the max key contributes exp(0)
    for (int64_t d = 0; d < s.d_head; ++d) out[r * s.d_head + d] = total.acc[r * s.d_head + d] * inv_sum;
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

// One whole item on one thread: its chunks in order, merged as they come.
template <class T>
void attend_item(const PagedKvLayer<T>& kv, const ItemRef& item, const Shape& s, const AttentionParams& params,
                 const ItemScratch& it, const AttentionOps<T>& ops) {
  int64_t first, last;
  visible_keys(*item.seq, item.t, params, &first, &last);
  clear(it.total, s, item.n_heads);
  for (int64_t c = first / kChunkKeys; c <= last / kChunkKeys; ++c) {
    int64_t begin, end;
    chunk_range(first, last, c, &begin, &end);
    chunk_partial(kv, item, s, params, begin, end, it.chunk, it, ops);
    merge(it.total, it.chunk, s, item.n_heads);
  }
  write_output(it.total, item, s);
}

// Tiles: a sequence's consecutive query tokens (a prefill chunk, a speculative step's
// drafts) processed together per KV head, so each K/V block is read from memory once for
// all of them rather than once per token. Each token still walks exactly its own keys
// chunk by chunk and block by block, through the same add_block, so its output has the
// same bits as on the per-token path (the scores of a key do not depend on which other
// keys or rows are computed with it).
constexpr int64_t kMaxTileTokens = 16;

struct TileScratch {
  float* totals;  // [n_t] partials
  float* chunks;  // [n_t] partials
  float* scores;  // [n_t][n_rep][block_size]
};

TileScratch carve_tile(float* base, const Shape& s) {
  const auto partial = static_cast<int64_t>(partial_floats(s));
  return TileScratch{base, base + kMaxTileTokens * partial, base + 2 * kMaxTileTokens * partial};
}

template <class T>
void attend_tile(const PagedKvLayer<T>& kv, const ItemRef& item, const Shape& s, const AttentionParams& params,
                 const TileScratch& it, const AttentionOps<T>& ops) {
  const AttentionSequence& seq = *item.seq;
  const int64_t g = item.g, n_t = item.n_t, n_heads = item.n_heads;
  const int64_t row_stride = unit_row_stride<T>(s);
  const auto partial = static_cast<int64_t>(partial_floats(s));
  int64_t first[kMaxTileTokens], last[kMaxTileTokens], lo = INT64_MAX, hi = -1;
  for (int64_t i = 0; i < n_t; ++i) {
    visible_keys(seq, item.t + i, params, &first[i], &last[i]);
    lo = std::min(lo, first[i]);
    hi = std::max(hi, last[i]);
    clear(partial_at(it.totals + i * partial, s), s, n_heads);
  }
  for (int64_t c = lo / kChunkKeys; c <= hi / kChunkKeys; ++c) {
    int64_t begin[kMaxTileTokens], end[kMaxTileTokens], c_lo = INT64_MAX, c_hi = -1;
    for (int64_t i = 0; i < n_t; ++i) {
      chunk_range(first[i], last[i], c, &begin[i], &end[i]);
      if (begin[i] >= end[i]) continue;  // this token sees no key of chunk c
      c_lo = std::min(c_lo, begin[i]);
      c_hi = std::max(c_hi, end[i]);
      clear(partial_at(it.chunks + i * partial, s), s, n_heads);
    }
    for (int64_t j0 = c_lo; j0 < c_hi;) {
      const int64_t table_index = j0 / s.block_size;
      const int64_t j1 = std::min(c_hi, (table_index + 1) * s.block_size);
      const int32_t block = seq.block_table[static_cast<size_t>(table_index)];
      if (block < 0 || block >= s.n_blocks)
        throw Error(str_cat("attention: block table entry ", table_index, " is ", block, " but holds keys ", j0,
                            "..", j1 - 1, " inside the window of position ", seq.q_pos[item.t + n_t - 1],
                            " (pool has ", s.n_blocks, " blocks)"));
      const int64_t first_row = static_cast<int64_t>(block) * s.block_size + j0 % s.block_size;
      for (int64_t i = 0; i < n_t; ++i) {
        const int64_t k0 = std::max(j0, begin[i]), k1 = std::min(j1, end[i]);
        if (k0 >= k1) continue;
        const float* q = seq.q + ((item.t + i) * s.n_head + g * s.n_rep + item.r0) * s.d_head;
        const T* k_rows = kv.k + (first_row + k0 - j0) * row_stride + unit_head_offset<T>(s, g);
        const T* v_rows = kv.v + (first_row + k0 - j0) * row_stride + unit_head_offset<T>(s, g);
        float* scores = it.scores + i * s.n_rep * s.block_size;
        ops.scores(q, n_heads, s.d_head, k_rows, row_stride, k1 - k0, params.scale, scores, s.block_size);
        add_block(v_rows, k1 - k0, scores, n_heads, s, params, partial_at(it.chunks + i * partial, s), ops);
      }
      j0 = j1;
    }
    for (int64_t i = 0; i < n_t; ++i)
      if (begin[i] < end[i]) merge(partial_at(it.totals + i * partial, s), partial_at(it.chunks + i * partial, s), s, n_heads);
  }
  for (int64_t i = 0; i < n_t; ++i) {
    ItemRef one = item;
    one.t = item.t + i;
    one.n_t = 1;
    write_output(partial_at(it.totals + i * partial, s), one, s);
  }
}

// Few items and long contexts (decode of one or two sequences): the chunks of every item
// are spread over the threads, their partials kept in the shared scratch, then merged.
constexpr int64_t kMaxSplitItems = 16;

}  // namespace

size_t attention_scratch_floats(int64_t n_head, int64_t n_kv_head, int64_t d_head, int64_t block_size) {
  const int64_t n_rep = n_kv_head > 0 ? n_head / n_kv_head : n_head;
  // The larger of one token's item (two partials and a block's scores) and a tile's.
  const int64_t one = n_rep * (2 * d_head + 4 + block_size);
  const int64_t tile = kMaxTileTokens * n_rep * (2 * d_head + 4 + block_size);
  return static_cast<size_t>(std::max(one, tile));
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
  if (isa == Isa::kAvx2 && best_isa() != Isa::kAvx2) throw Error("attention: this CPU has no AVX2+FMA");
  const Shape s{n_head, kv.n_kv_head, n_head / kv.n_kv_head, kv.d_head, kv.block_size, kv.n_blocks};
  scratch.require(pool.n_threads(), attention_scratch_floats(n_head, kv.n_kv_head, kv.d_head, kv.block_size),
                  "attention");
  int64_t n_groups = 0;  // (sequence, token, kv head) triples
  for (size_t i = 0; i < sequences.size(); ++i) {
    check_sequence(sequences[i], i, s);
    n_groups += std::max<int64_t>(0, sequences[i].n_q) * s.n_kv_head;
  }
  const int64_t n_threads = pool.n_threads();
  const AttentionOps<T> ops = ops_for<T>(isa);
  // Tiles when the tokens alone give every thread work: as long as the tiles still do.
  int64_t tile = 1;
  auto n_tile_items = [&](int64_t size) {
    int64_t n = 0;
    for (const AttentionSequence& seq : sequences) n += (std::max<int64_t>(0, seq.n_q) + size - 1) / size * s.n_kv_head;
    return n;
  };
  if (n_groups >= n_threads) {
    tile = kMaxTileTokens;
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
      float* base = scratch.thread_data(thread);
      for (int64_t i = begin; i < end; ++i) {
        const ItemRef item = tile_at(i);
        if (item.n_t == 1)
          attend_item(kv, item, s, params, carve(base, s), ops);
        else
          attend_tile(kv, item, s, params, carve_tile(base, s), ops);
      }
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
    const size_t needed = static_cast<size_t>(n_units) * partial_floats(s) * sizeof(float);
    if (n_units > n_items && needed <= scratch.shared_bytes()) {
      float* partials = reinterpret_cast<float*>(scratch.shared_data());
      pool.parallel_for_dynamic(n_units, 1, [&](int64_t begin, int64_t end, int thread) {
        const ItemScratch it = carve(scratch.thread_data(thread), s);
        for (int64_t u = begin; u < end; ++u) {
          int64_t i = 0;
          while (u >= unit_begin[i + 1]) ++i;
          int64_t first, last, k_begin, k_end;
          visible_keys(*items[i].seq, items[i].t, params, &first, &last);
          chunk_range(first, last, first_chunk[i] + (u - unit_begin[i]), &k_begin, &k_end);
          chunk_partial(kv, items[i], s, params, k_begin, k_end, partial_at(partials + u * partial_floats(s), s), it,
                        ops);
        }
      });
      const ItemScratch it = carve(scratch.thread_data(0), s);
      for (int64_t i = 0; i < n_items; ++i) {
        clear(it.total, s, items[i].n_heads);
        for (int64_t u = unit_begin[i]; u < unit_begin[i + 1]; ++u)
          merge(it.total, partial_at(partials + u * partial_floats(s), s), s, items[i].n_heads);
        write_output(it.total, items[i], s);
      }
      return;
    }
  }

  // Item costs grow with the position, so threads take them one at a time.
  pool.parallel_for_dynamic(n_items, 1, [&](int64_t begin, int64_t end, int thread) {
    const ItemScratch it = carve(scratch.thread_data(thread), s);
    for (int64_t item = begin; item < end; ++item) attend_item(kv, item_at(item), s, params, it, ops);
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
  static const auto fn = best_isa() == Isa::kAvx2 ? &kv_row_to_f16_avx2 : &kv_row_to_f16_scalar;
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
