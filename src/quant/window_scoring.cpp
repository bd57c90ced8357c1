#include "quant/window_scoring.h"

#include <utility>

namespace ridge::quant {

std::vector<int32_t> perplexity_tokens(const Tokenizer& tokenizer, std::string_view text) {
  return tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/false);
}

WindowScoring::WindowScoring(std::span<const int32_t> text_tokens, const PerplexityWindows& windows,
                             const Tokenizer& tokenizer, ScoreRow score_row)
    : windows_(windows), score_row_(std::move(score_row)), nll_(static_cast<size_t>(windows.n_chunk)) {
  if (!score_row_)
    score_row_ = [](int32_t, int32_t, std::span<const float> logits, int32_t next) { return token_nll(logits, next); };
  const bool add_bos = tokenizer.vocab().add_bos() && tokenizer.bos() >= 0;
  tokens_.resize(static_cast<size_t>(windows.n_chunk));
  for (int32_t i = 0; i < windows.n_chunk; ++i) {
    const auto begin = text_tokens.begin() + static_cast<std::ptrdiff_t>(i) * windows.n_ctx;
    std::vector<int32_t>& w = tokens_[static_cast<size_t>(i)];
    w.assign(begin, begin + windows.n_ctx);
    if (add_bos) w[0] = tokenizer.bos();
  }
}

std::vector<RequestParams> WindowScoring::requests() {
  std::vector<RequestParams> out;
  out.reserve(tokens_.size());
  for (int32_t i = 0; i < windows_.n_chunk; ++i) {
    RequestParams p;
    p.prompt = tokens_[static_cast<size_t>(i)];
    p.score_from = windows_.first;
    p.score = [this, i](int32_t pos, std::span<const float> logits) {
      const int32_t next = tokens_[static_cast<size_t>(i)][static_cast<size_t>(pos) + 1];
      nll_[static_cast<size_t>(i)].add(score_row_(i, pos - windows_.first, logits, next));
    };
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace ridge::quant
