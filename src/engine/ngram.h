// Prompt lookup (n-gram) drafting: the longest suffix of a sequence's tokens that also
// occurred earlier proposes the tokens that followed that earlier occurrence. It reads no
// weights, so its drafts cost only the verification. Text that repeats its context (code
// edits, quoting, summaries with names) is drafted well; free prose rarely.
//
//   std::vector<int32_t> drafts;
//   ngram_propose(tokens, {.min_ngram = 2, .max_ngram = 8}, 5, drafts);  // drafts: <= 5 tokens
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ridge {

struct NgramOptions {
  int32_t min_ngram = 2;  // shortest suffix that may match
  int32_t max_ngram = 8;  // longest suffix compared
};

// Finds the longest suffix of tokens, between min_ngram and max_ngram tokens, that also
// ends at an earlier position with at least one token after it; among equally long
// matches, the most recent. Writes up to n_max of the tokens that followed it into out
// (cleared first) and returns the length of the matched suffix (0: no match, out empty).
int32_t ngram_propose(std::span<const int32_t> tokens, const NgramOptions& options, int32_t n_max,
                      std::vector<int32_t>& out);

}  // namespace ridge
