// A text's perplexity windows (perplexity.h) as scoring requests to the engine
// (RequestParams::score): the computation `ridge perplexity` and the Python package's
// LLM.perplexity share. Each window is one request; the engine runs them side by side.
//
//   std::vector<int32_t> tokens = perplexity_tokens(tokenizer, text);
//   WindowScoring scoring(tokens, plan_windows(tokens.size(), 512, -1), tokenizer);
//   auto streams = engine.submit(scoring.requests());   // scoring outlives the requests
//   NllStats total;
//   for (int32_t i = 0; i < scoring.n_windows(); ++i) {
//     /* read streams[i] to its finished event */  total.add(scoring.window_nll(i));
//   }
//   total.perplexity();
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "quant/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace ridge::quant {

// The tokens llama-perplexity evaluates a text as: BOS where the vocabulary adds one,
// special-token text left as text.
std::vector<int32_t> perplexity_tokens(const Tokenizer& tokenizer, std::string_view text);

class WindowScoring {
 public:
  // What a scored position contributes: given the logits that predict the window's token
  // `next` at index (position - windows.first), returns -log p(next). Runs on the engine
  // thread, in position order within a window; windows may interleave. Default: token_nll.
  using ScoreRow = std::function<double(int32_t window, int32_t index, std::span<const float> logits, int32_t next)>;

  // text_tokens: at least windows.n_chunk * windows.n_ctx tokens. Each window's first
  // token becomes BOS where the tokenizer's vocabulary adds one.
  WindowScoring(std::span<const int32_t> text_tokens, const PerplexityWindows& windows, const Tokenizer& tokenizer,
                ScoreRow score_row = {});

  // One scoring request per window, in order. They point into this object: it must
  // outlive them (until each has finished, or the engine has stopped).
  std::vector<RequestParams> requests();

  int32_t n_windows() const { return windows_.n_chunk; }
  const PerplexityWindows& windows() const { return windows_; }
  // A window's negative log-likelihoods; complete once its request has finished.
  const NllStats& window_nll(int32_t window) const { return nll_[static_cast<size_t>(window)]; }

 private:
  PerplexityWindows windows_;
  ScoreRow score_row_;
  std::vector<std::vector<int32_t>> tokens_;  // [n_chunk][n_ctx] as evaluated
  std::vector<NllStats> nll_;                 // [n_chunk]
};

}  // namespace ridge::quant
