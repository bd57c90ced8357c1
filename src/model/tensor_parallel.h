// How a model is cut across the ranks of a tensor-parallel group (Megatron-style), and
// the cut applied to the weight views, still zero-copy into the one GGUF mapping:
//  - attn_q/k/v and ffn_gate/up split by output features (whole heads; a range of rows);
//  - the output matrix split by rows (the vocabulary): rank 0 gathers the logits;
//  - attn_output and ffn_down split by input features (the same heads and feed-forward
//    range; a range of blocks inside every row, read through the view's row stride);
//    each rank's partial product is then summed over ranks: one all-reduce after each.
// The feed-forward range falls on ffn_down's quant blocks (32 or 256 values), split as
// evenly as whole blocks allow. A model with fewer KV heads than ranks repeats each KV
// head on the ranks whose query heads use it (as vLLM does): rank r holds KV head
// r * n_kv_head / n_ranks, and its cache holds that head only.
//
//   TpShard s = plan_tp_shard(config, weights, rank, n_ranks);  // throws naming the numbers
//   shard_weights(weights, config, s);                          // views narrowed in place
#pragma once

#include <cstdint>

#include "model/config.h"
#include "model/weights.h"

namespace ridge {

struct TpShard {
  int rank = 0;
  int n_ranks = 1;
  int32_t head_first = 0;     // this rank's query heads: head_first .. + n_head - 1
  int32_t n_head = 0;
  int32_t kv_head_first = 0;  // its KV heads (whole; repeated when the model has fewer than ranks)
  int32_t n_kv_head = 0;
  int32_t ff_first = 0;       // its feed-forward features: ff_first .. + n_ff - 1
  int32_t n_ff = 0;
  int32_t vocab_first = 0;    // its rows of the output matrix (logits), split evenly
  int32_t n_vocab = 0;
};

// The shard of `rank` in a group of n_ranks (1: the whole model). Throws ridge::Error
// naming the model's numbers when the cut is impossible: query heads that do not divide
// by n_ranks, KV heads that neither divide by n_ranks nor divide it, a head range or a
// feed-forward range off the quant blocks of attn_output or ffn_down, fewer feed-forward
// blocks than ranks, or an architecture the cut does not cover yet (mixtures of experts,
// OLMoE's norm over all heads).
TpShard plan_tp_shard(const ModelConfig& config, const ModelWeights& weights, int rank, int n_ranks);

// Narrows every layer's views (matrices, q/k/v biases) and the output matrix's rows to
// the shard. The token embedding and the norms stay whole.
void shard_weights(ModelWeights& weights, const ModelConfig& config, const TpShard& shard);

}  // namespace ridge
