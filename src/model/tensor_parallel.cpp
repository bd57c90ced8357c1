#include "model/tensor_parallel.h"

#include <algorithm>

#include "core/error.h"

namespace ridge {
namespace {

// Rows [first, first + n): a range of output features.
kernels::WeightMatrix rows(const kernels::WeightMatrix& w, int64_t first, int64_t n) {
  return {w.dtype, w.n_in, n, w.data + static_cast<size_t>(first) * w.row_bytes, w.row_bytes};
}

// Columns [first, first + n) of every row: a range of input features, whole blocks. The
// row stride stays the full row's, so the kernels step over the other ranks' blocks.
kernels::WeightMatrix columns(const kernels::WeightMatrix& w, int64_t first, int64_t n) {
  return {w.dtype, n, w.n_out, w.data + row_size(w.dtype, first), w.row_bytes};
}

int64_t block_of(const kernels::WeightMatrix& w) { return type_traits(w.dtype).block_size; }

}  // namespace

TpShard plan_tp_shard(const ModelConfig& c, const ModelWeights& w, int rank, int n_ranks) {
  TpShard s;
  s.rank = rank;
  s.n_ranks = n_ranks;
  s.n_head = c.n_head;
  s.n_kv_head = c.n_kv_head;
  s.n_ff = c.n_ff;
  s.n_vocab = c.n_vocab;
  if (n_ranks == 1) return s;
  s.vocab_first = static_cast<int32_t>(int64_t{c.n_vocab} * rank / n_ranks);
  s.n_vocab = static_cast<int32_t>(int64_t{c.n_vocab} * (rank + 1) / n_ranks) - s.vocab_first;
  const std::string where = str_cat("tensor parallel --tp ", n_ranks, ": ", c.arch, " model '", c.name, "'");
  if (rank < 0 || rank >= n_ranks) throw Error(str_cat(where, ": rank ", rank, " outside 0..", n_ranks - 1));
  if (c.n_expert > 0) throw Error(str_cat(where, ": mixture-of-experts layers are not split yet"));
  if (c.qk_norm_full)
    throw Error(str_cat(where, ": its q/k norm spans all heads (qk_norm_full), which a head split cannot compute"));
  if (c.n_head % n_ranks != 0)
    throw Error(str_cat(where, " has ", c.n_head, " attention heads, which do not divide by ", n_ranks,
                        " ranks: use a --tp that divides ", c.n_head));
  s.n_head = c.n_head / n_ranks;
  s.head_first = rank * s.n_head;
  if (c.n_kv_head % n_ranks == 0) {
    s.n_kv_head = c.n_kv_head / n_ranks;
    s.kv_head_first = rank * s.n_kv_head;
  } else if (n_ranks % c.n_kv_head == 0) {  // fewer KV heads than ranks: each repeated
    s.n_kv_head = 1;
    s.kv_head_first = rank * c.n_kv_head / n_ranks;
  } else {
    throw Error(str_cat(where, " has ", c.n_kv_head, " KV heads: ", n_ranks, " ranks must divide them or be a ",
                        "multiple of them"));
  }
  // attn_output's input features are this rank's heads: whole quant blocks of its rows.
  const LayerWeights& l0 = w.layers.front();
  for (const LayerWeights& l : w.layers) {
    const int64_t block = block_of(l.wo);
    if ((int64_t{s.n_head} * c.d_head) % block != 0)
      throw Error(str_cat(where, ": ", s.n_head, " heads x ", c.d_head, " per rank do not fill whole blocks of ",
                          block, " in attn_output (", dtype_name(l.wo.dtype), ")"));
  }
  // The feed-forward features in whole blocks of ffn_down's rows (the largest block of
  // any layer), as evenly as they go.
  int64_t block = 1;
  for (const LayerWeights& l : w.layers) block = std::max(block, block_of(l.w_down));
  const int64_t n_blocks = c.n_ff / block;
  if (c.n_ff % block != 0 || n_blocks < n_ranks)
    throw Error(str_cat(where, ": the feed-forward width ", c.n_ff, " is ", n_blocks, " blocks of ", block,
                        " (ffn_down, ", dtype_name(l0.w_down.dtype), "), fewer than ", n_ranks,
                        " ranks or not whole"));
  const int64_t first = n_blocks * rank / n_ranks, last = n_blocks * (rank + 1) / n_ranks;
  s.ff_first = static_cast<int32_t>(first * block);
  s.n_ff = static_cast<int32_t>((last - first) * block);
  return s;
}

void shard_weights(ModelWeights& w, const ModelConfig& c, const TpShard& s) {
  if (s.n_ranks == 1) return;
  w.output = rows(w.output, s.vocab_first, s.n_vocab);  // a tied embedding keeps its own whole view
  const int64_t q_first = int64_t{s.head_first} * c.d_head, q_n = int64_t{s.n_head} * c.d_head;
  const int64_t kv_first = int64_t{s.kv_head_first} * c.d_head, kv_n = int64_t{s.n_kv_head} * c.d_head;
  for (LayerWeights& l : w.layers) {
    l.wq = rows(l.wq, q_first, q_n);
    l.wk = rows(l.wk, kv_first, kv_n);
    l.wv = rows(l.wv, kv_first, kv_n);
    if (l.bq != nullptr) {
      l.bq += q_first;
      l.bk += kv_first;
      l.bv += kv_first;
    }
    l.wo = columns(l.wo, q_first, q_n);
    l.w_gate = rows(l.w_gate, s.ff_first, s.n_ff);
    l.w_up = rows(l.w_up, s.ff_first, s.n_ff);
    l.w_down = columns(l.w_down, s.ff_first, s.n_ff);
  }
}

}  // namespace ridge
