#include "engine/ngram.h"

#include <algorithm>

namespace ridge {

int32_t ngram_propose(std::span<const int32_t> tokens, const NgramOptions& options, int32_t n_max,
                      std::vector<int32_t>& out) {
  out.clear();
  const auto n = static_cast<int64_t>(tokens.size());
  if (n_max <= 0 || n < 2 || options.min_ngram < 1) return 0;
  const int64_t max_ngram = std::min<int64_t>(options.max_ngram, n - 1);
  // Walk earlier end positions j, most recent first, measuring how far the suffix ending
  // at j agrees with the sequence's own suffix; the first strictly longest wins, so a tie
  // goes to the most recent. Most positions fail on the first comparison.
  int64_t best_length = 0, best_end = -1;
  const int32_t last = tokens[static_cast<size_t>(n - 1)];
  for (int64_t j = n - 2; j >= 0 && best_length < max_ngram; --j) {
    if (tokens[static_cast<size_t>(j)] != last) continue;
    int64_t length = 1;
    while (length < max_ngram && j - length >= 0 &&
           tokens[static_cast<size_t>(j - length)] == tokens[static_cast<size_t>(n - 1 - length)]) {
      ++length;
    }
    if (length > best_length) {
      best_length = length;
      best_end = j;
    }
  }
  if (best_length < options.min_ngram) return 0;
  const int64_t take = std::min<int64_t>(n_max, n - 1 - best_end);
  out.assign(tokens.begin() + best_end + 1, tokens.begin() + best_end + 1 + take);
  return static_cast<int32_t>(best_length);
}

}  // namespace ridge
