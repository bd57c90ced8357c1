#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "kernels/dot.h"

namespace ridge::kernels {

namespace {

// Shapes shared by every item of one attention() call.
struct Shape {
  int64_t n_head, n_kv_head, n_rep, d_head, block_size, n_blocks;
};

// Per-thread scratch carved for one item: the group's accumulators and one block's scores.
struct ItemScratch {
  float* acc;     // [n_rep][d_head]   unnormalized output
  float* scores;  // [n_rep][block_size] scores, then probabilities, of the current block
  float* max;     // [n_rep] running max
  float* sum;     // [n_rep] running sum of exp(score - max)
  float* row;     // [d_head] a K or V row converted to float (T != float)
};

ItemScratch carve(float* base, const Shape& s) {
  ItemScratch it;
  it.acc = base;
  it.scores = it.acc + s.n_rep * s.d_head;
  it.max = it.scores + s.n_rep * s.block_size;
  it.sum = it.max + s.n_rep;
  it.row = it.sum + s.n_rep;
  return it;
}

template <class T>
const float* as_float_row(const T* src, float* buffer, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    (void)buffer;
    (void)n;
    return src;
  } else {
    for (int64_t i = 0; i < n; ++i) buffer[i] = static_cast<float>(src[i]);
    return buffer;
  }
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

// One query token of one sequence against one KV head, for the n_rep query heads of
// its group. Walks the visible keys block by block; per block, scores all keys first,
// then rescales the accumulators once (not once per key) and adds p * V.
template <class T>
void attend_group(const PagedKvLayer<T>& kv, const AttentionSequence& seq, int64_t t, int64_t g,
                  const Shape& s, const AttentionParams& params, const ItemScratch& it) {
  const int64_t pos = seq.q_pos[t];
  const int64_t first = params.window > 0 ? std::max<int64_t>(0, pos - params.window + 1) : 0;
  const int64_t last = pos;  // inclusive: causal
  const int64_t row_stride = s.n_kv_head * s.d_head;
  const float* q = seq.q + (t * s.n_head + g * s.n_rep) * s.d_head;  // [n_rep][d_head]

  std::fill(it.acc, it.acc + s.n_rep * s.d_head, 0.0f);
  std::fill(it.max, it.max + s.n_rep, -INFINITY);
  std::fill(it.sum, it.sum + s.n_rep, 0.0f);

  for (int64_t j0 = first; j0 <= last;) {
    const int64_t table_index = j0 / s.block_size;
    const int64_t j1 = std::min(last + 1, (table_index + 1) * s.block_size);
    const int64_t count = j1 - j0;
    const int32_t block = seq.block_table[static_cast<size_t>(table_index)];
    if (block < 0 || block >= s.n_blocks)
      throw Error(str_cat("attention: block table entry ", table_index, " is ", block,
                          " but holds keys ", j0, "..", j1 - 1, " inside the window of position ", pos,
                          " (pool has ", s.n_blocks, " blocks)"));
    const int64_t first_row = (static_cast<int64_t>(block) * s.block_size + j0 % s.block_size);
    const T* k_rows = kv.k + first_row * row_stride + g * s.d_head;
    const T* v_rows = kv.v + first_row * row_stride + g * s.d_head;

    for (int64_t jj = 0; jj < count; ++jj) {
      const float* k = as_float_row(k_rows + jj * row_stride, it.row, s.d_head);
      for (int64_t r = 0; r < s.n_rep; ++r) {
        float score = dot_f32(q + r * s.d_head, k, s.d_head) * params.scale;
        if (params.softcap > 0) score = std::tanh(score / params.softcap) * params.softcap;
        it.scores[r * s.block_size + jj] = score;
      }
    }
    for (int64_t r = 0; r < s.n_rep; ++r) {
      float* scores = it.scores + r * s.block_size;
      float block_max = scores[0];
      for (int64_t jj = 1; jj < count; ++jj) block_max = std::max(block_max, scores[jj]);
      const float new_max = std::max(it.max[r], block_max);
      if (new_max > it.max[r]) {
        const float correction = std::exp(it.max[r] - new_max);  // 0 on the first block
        it.sum[r] *= correction;
        float* acc = it.acc + r * s.d_head;
        for (int64_t d = 0; d < s.d_head; ++d) acc[d] *= correction;
        it.max[r] = new_max;
      }
      float block_sum = 0;
      for (int64_t jj = 0; jj < count; ++jj) {
        scores[jj] = std::exp(scores[jj] - new_max);
        block_sum += scores[jj];
      }
      it.sum[r] += block_sum;
    }
    for (int64_t jj = 0; jj < count; ++jj) {
      const float* v = as_float_row(v_rows + jj * row_stride, it.row, s.d_head);
      for (int64_t r = 0; r < s.n_rep; ++r)
        axpy_f32(it.scores[r * s.block_size + jj], v, it.acc + r * s.d_head, s.d_head);
    }
    j0 = j1;
  }

  float* out = seq.out + (t * s.n_head + g * s.n_rep) * s.d_head;
  for (int64_t r = 0; r < s.n_rep; ++r) {
    const float inv_sum = 1.0f / it.sum[r];  // sum >= 1: the max key contributes exp(0)
    for (int64_t d = 0; d < s.d_head; ++d) out[r * s.d_head + d] = it.acc[r * s.d_head + d] * inv_sum;
  }
}

}  // namespace

size_t attention_scratch_floats(int64_t n_head, int64_t n_kv_head, int64_t d_head, int64_t block_size) {
  const int64_t n_rep = n_kv_head > 0 ? n_head / n_kv_head : n_head;
  return static_cast<size_t>(n_rep * (d_head + block_size + 2) + d_head);
}

template <class T>
void attention(const PagedKvLayer<T>& kv, std::span<const AttentionSequence> sequences,
               int64_t n_head, const AttentionParams& params, ThreadPool& pool, Scratch& scratch) {
  if (kv.k == nullptr || kv.v == nullptr || kv.n_blocks <= 0 || kv.block_size <= 0 ||
      kv.n_kv_head <= 0 || kv.d_head <= 0 || n_head <= 0 || n_head % kv.n_kv_head != 0)
    throw Error(str_cat("attention: bad shapes: n_head ", n_head, ", n_kv_head ", kv.n_kv_head, ", d_head ",
                        kv.d_head, ", block_size ", kv.block_size, ", n_blocks ", kv.n_blocks));
  const Shape s{n_head, kv.n_kv_head, n_head / kv.n_kv_head, kv.d_head, kv.block_size, kv.n_blocks};
  scratch.require(pool.n_threads(), attention_scratch_floats(n_head, kv.n_kv_head, kv.d_head, kv.block_size),
                  "attention");
  int64_t n_items = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    check_sequence(sequences[i], i, s);
    n_items += std::max<int64_t>(0, sequences[i].n_q) * s.n_kv_head;
  }

  // Items are (sequence, token, kv head) in order; their cost grows with the position,
  // so threads take them one at a time instead of in fixed chunks.
  pool.parallel_for_dynamic(n_items, 1, [&](int64_t begin, int64_t end, int thread) {
    const ItemScratch it = carve(scratch.thread_data(thread), s);
    size_t seq_index = 0;
    int64_t seq_first_item = 0;
    for (int64_t item = begin; item < end; ++item) {
      for (;;) {
        const int64_t seq_items = std::max<int64_t>(0, sequences[seq_index].n_q) * s.n_kv_head;
        if (item < seq_first_item + seq_items) break;
        seq_first_item += seq_items;
        ++seq_index;
      }
      const int64_t local = item - seq_first_item;
      attend_group(kv, sequences[seq_index], local / s.n_kv_head, local % s.n_kv_head, s, params, it);
    }
  });
}

template void attention<float>(const PagedKvLayer<float>&, std::span<const AttentionSequence>, int64_t,
                               const AttentionParams&, ThreadPool&, Scratch&);

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
