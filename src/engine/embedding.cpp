#include "engine/embedding.h"

#include <cmath>

#include "core/error.h"

namespace ridge {

EmbeddingPool::EmbeddingPool(Pooling pooling, int32_t n_embd, int32_t n_tokens)
    : pooling_(pooling), n_embd_(n_embd), n_tokens_(n_tokens) {
  if (pooling != Pooling::kMean && pooling != Pooling::kCls && pooling != Pooling::kLast)
    throw Error(str_cat("embedding: pooling '", pooling_name(pooling),
                        "' gives no single vector per input (mean, cls or last do)"));
  if (n_embd < 1 || n_tokens < 1)
    throw Error(str_cat("embedding: needs n_embd and n_tokens >= 1, got ", n_embd, " and ", n_tokens));
  seen_.assign(static_cast<size_t>(n_tokens), false);
  sum_.assign(static_cast<size_t>(n_embd), 0.0);
}

bool EmbeddingPool::wanted(int32_t position) const {
  switch (pooling_) {
    case Pooling::kCls: return position == 0;
    case Pooling::kLast: return position == n_tokens_ - 1;
    default: return true;
  }
}

void EmbeddingPool::add(int32_t position, std::span<const float> hidden) {
  if (position < 0 || position >= n_tokens_)
    throw Error(str_cat("embedding: position ", position, " outside the input's 0..", n_tokens_ - 1));
  if (hidden.size() != static_cast<size_t>(n_embd_))
    throw Error(str_cat("embedding: hidden state of ", hidden.size(), " values, expected ", n_embd_));
  if (seen_[static_cast<size_t>(position)]) throw Error(str_cat("embedding: position ", position, " given twice"));
  seen_[static_cast<size_t>(position)] = true;
  if (!wanted(position)) return;
  ++n_added_;
  for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += hidden[i];
}

std::vector<float> EmbeddingPool::result() const {
  const int32_t needed = pooling_ == Pooling::kMean ? n_tokens_ : 1;
  if (n_added_ != needed)
    throw Error(str_cat("embedding: ", pooling_name(pooling_), " pooling has ", n_added_, " of the ", needed,
                        " token states it needs"));
  // The mean's 1/n cancels in the normalisation: scale the sum by its length alone.
  double norm2 = 0.0;
  for (double v : sum_) norm2 += v * v;
  const double scale = norm2 > 0.0 ? 1.0 / std::sqrt(norm2) : 0.0;
  std::vector<float> out(sum_.size());
  for (size_t i = 0; i < sum_.size(); ++i) out[i] = static_cast<float>(sum_[i] * scale);
  return out;
}

}  // namespace ridge
