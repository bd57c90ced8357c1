// Tensor parallelism's step protocol (model/tensor_parallel.h cuts the weights). Rank 0's
// forward broadcasts each step before computing it: a header, then the step as int32
// values (tokens, positions, sequences, block tables). The other ranks run the same
// layers on their shards, writing K/V of their heads into their twin of rank 0's cache,
// which rank 0 announces (its configuration) the first time a step uses it. The
// bookkeeping (which blocks a sequence holds, prefix reuse, preemption) stays rank 0's
// alone: the others only follow its block tables. Every rank computes its rows of the
// vocabulary's logits; rank 0 gathers them.
#include <algorithm>
#include <cstring>

#include "kernels/ops/ops.h"

#include "core/error.h"
#include "model/model.h"

namespace ridge {
namespace {

enum class TpMessage : int64_t { kStop = 0, kCache = 1, kStep = 2 };

// header: kind, payload int32 count, cache id, cache budget bytes.
struct TpHeader {
  int64_t kind = 0;
  int64_t n_values = 0;
  int64_t cache_id = 0;
  int64_t budget_bytes = 0;
};

// Twins the other ranks keep at once: `ridge bench` drives up to three engines (three
// caches) on one model; each engine keeps its cache for its life.
constexpr size_t kMaxTwinCaches = 4;
constexpr int32_t kSequenceFields = 5;  // seq, first, n_tokens, start_pos, n_tentative

}  // namespace

Model::~Model() {
  if (comm_ == nullptr || comm_->rank() != 0) return;
  TpHeader stop{static_cast<int64_t>(TpMessage::kStop)};
  comm_->broadcast(&stop, sizeof stop);
}

void Model::send_tp_step(const Batch& b, const KvCache& cache, int32_t max_rows) {
  const uint64_t id = cache.id();
  auto known = std::find(tp_sent_caches_.begin(), tp_sent_caches_.end(), id);
  if (known == tp_sent_caches_.end()) {
    if (std::find(tp_dropped_caches_.begin(), tp_dropped_caches_.end(), id) != tp_dropped_caches_.end())
      throw Error(str_cat("forward: tensor parallel: KV cache ", id, " was dropped on the other ranks (more than ",
                          kMaxTwinCaches, " caches in use on one model)"));
    const KvCacheConfig& kv = cache.config();
    tp_ints_.assign({kv.block_size, static_cast<int32_t>(kv.dtype), kv.max_sequences, kv.max_context,
                     kv.max_step_tokens});
    for (const KvLayerSpec& l : kv.layers) tp_ints_.insert(tp_ints_.end(), {l.n_kv_head, l.d_head, l.window});
    TpHeader h{static_cast<int64_t>(TpMessage::kCache), static_cast<int64_t>(tp_ints_.size()),
               static_cast<int64_t>(id), static_cast<int64_t>(kv.budget_bytes)};
    comm_->broadcast(&h, sizeof h);
    comm_->broadcast(tp_ints_.data(), tp_ints_.size() * sizeof(int32_t));
    if (tp_sent_caches_.size() == kMaxTwinCaches) {  // the least recently used goes, as on the others
      tp_dropped_caches_.push_back(tp_sent_caches_.front());
      tp_sent_caches_.erase(tp_sent_caches_.begin());
    }
    tp_sent_caches_.push_back(id);
  } else {
    std::rotate(known, known + 1, tp_sent_caches_.end());  // most recently used last
  }

  const int32_t n = b.n_tokens();
  tp_ints_.assign({n, static_cast<int32_t>(b.sequences.size())});
  tp_ints_.insert(tp_ints_.end(), b.tokens.begin(), b.tokens.end());
  tp_ints_.insert(tp_ints_.end(), b.positions.begin(), b.positions.end());
  for (const BatchSequence& s : b.sequences)
    tp_ints_.insert(tp_ints_.end(), {s.seq, s.first, s.n_tokens, s.start_pos, s.n_tentative});
  for (const BatchSequence& s : b.sequences) {
    for (int g = 0; g < cache.n_groups(); ++g) {
      const std::span<const int32_t> table = cache.block_table(s.seq, g);
      tp_ints_.push_back(static_cast<int32_t>(table.size()));
      tp_ints_.insert(tp_ints_.end(), table.begin(), table.end());
    }
  }
  tp_ints_.push_back(b.n_logit_rows());  // the others compute their vocabulary columns too
  tp_ints_.push_back(max_rows);
  tp_ints_.insert(tp_ints_.end(), b.logit_rows.begin(), b.logit_rows.end());
  TpHeader h{static_cast<int64_t>(TpMessage::kStep), static_cast<int64_t>(tp_ints_.size()), static_cast<int64_t>(id)};
  comm_->broadcast(&h, sizeof h);
  comm_->broadcast(tp_ints_.data(), tp_ints_.size() * sizeof(int32_t));
}

void Model::run_tp_worker() {
  if (!is_tp_worker()) throw Error("run_tp_worker: this model is not a tensor-parallel rank other than 0");
  try {
    while (true) {
      TpHeader h;
      comm_->broadcast(&h, sizeof h);
      const auto kind = static_cast<TpMessage>(h.kind);
      if (kind == TpMessage::kStop) return;
      tp_ints_.resize(static_cast<size_t>(h.n_values));
      comm_->broadcast(tp_ints_.data(), tp_ints_.size() * sizeof(int32_t));
      const int32_t* v = tp_ints_.data();

      if (kind == TpMessage::kCache) {
        KvCacheConfig kv;
        kv.block_size = v[0];
        kv.dtype = static_cast<DType>(v[1]);
        kv.max_sequences = v[2];
        kv.max_context = v[3];
        kv.max_step_tokens = v[4];
        kv.budget_bytes = static_cast<size_t>(h.budget_bytes);
        for (size_t i = 5; i + 2 < tp_ints_.size(); i += 3) kv.layers.push_back({v[i], v[i + 1], v[i + 2]});
        if (tp_caches_.size() == kMaxTwinCaches) tp_caches_.erase(tp_caches_.begin());
        tp_caches_.emplace_back(static_cast<uint64_t>(h.cache_id), std::make_unique<KvCache>(kv));
        continue;
      }
      if (kind != TpMessage::kStep) throw Error(str_cat("tensor parallel: unknown message kind ", h.kind));
      auto twin = std::find_if(tp_caches_.begin(), tp_caches_.end(),
                               [&](const auto& c) { return c.first == static_cast<uint64_t>(h.cache_id); });
      if (twin == tp_caches_.end()) throw Error(str_cat("tensor parallel: a step for unknown KV cache ", h.cache_id));
      std::rotate(twin, twin + 1, tp_caches_.end());  // most recently used last, as on rank 0
      KvCache& cache = *tp_caches_.back().second;

      const int32_t n = v[0], n_sequences = v[1];
      v += 2;
      Batch& b = tp_batch_;
      b.clear();
      b.tokens.assign(v, v + n);
      b.positions.assign(v + n, v + 2 * n);
      v += 2 * n;
      for (int32_t i = 0; i < n_sequences; ++i, v += kSequenceFields)
        b.sequences.push_back({v[0], v[1], v[2], v[3], v[4]});
      step_tables_.clear();
      for (int32_t i = 0; i < n_sequences * cache.n_groups(); ++i) {
        step_tables_.emplace_back(v + 1, static_cast<size_t>(v[0]));
        v += 1 + v[0];
      }
      const int32_t n_logit_rows = v[0], max_rows = v[1];
      b.logit_rows.assign(v + 2, v + 2 + n_logit_rows);
      run_layers(b, cache);
      // This rank's columns of the logits, in rank 0's slices of max_rows rows.
      const size_t need = static_cast<size_t>(std::min(max_rows, n_logit_rows)) * static_cast<size_t>(shard_.n_vocab);
      if (tp_logits_.size() < need) tp_logits_.resize(need);  // grows to the largest slice, once
      output_logits(b, LogitSink{tp_logits_.data(), max_rows, nullptr, nullptr});
    }
  } catch (const std::exception& e) {
    comm_->abort(e.what());
  }
}

}  // namespace ridge
