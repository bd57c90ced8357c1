// Pooling an input's final hidden states into one embedding vector (OpenAI's
// /v1/embeddings): the mean, the first (cls) or the last token's state, as the model's
// pooling_type says, then scaled to unit Euclidean length. Fed by an engine request with
// RequestParams::hidden, on the engine thread; read once the request has finished.
//
//   auto pool = std::make_shared<EmbeddingPool>(model.config().pooling, n_embd, prompt.size());
//   p.hidden = [pool](int32_t position, std::span<const float> h) { pool->add(position, h); };
//   ... the request's stream ends with FinishReason::kLength ...
//   std::vector<float> v = pool->result();   // [n_embd], |v| = 1
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/config.h"

namespace ridge {

class EmbeddingPool {
 public:
  // Throws ridge::Error for a pooling that gives no single vector per input (none, rank),
  // and for n_embd or n_tokens below 1.
  EmbeddingPool(Pooling pooling, int32_t n_embd, int32_t n_tokens);

  // The final hidden state ([n_embd]) of the input's token at `position`, each position
  // once, in any order. Throws ridge::Error for a position outside the input, a repeated
  // one or a wrong length.
  void add(int32_t position, std::span<const float> hidden);

  // The pooled, L2-normalised vector ([n_embd]; all zeros stay zeros). Throws ridge::Error
  // naming how many positions arrived when the pooling has not seen the ones it needs.
  std::vector<float> result() const;

  Pooling pooling() const { return pooling_; }

 private:
  bool wanted(int32_t position) const;  // does this pooling use the position?

  Pooling pooling_;
  int32_t n_embd_;
  int32_t n_tokens_;
  int32_t n_added_ = 0;         // wanted positions seen
  std::vector<bool> seen_;      // [n_tokens]
  std::vector<double> sum_;     // [n_embd] sum of the wanted states
};

}  // namespace ridge
