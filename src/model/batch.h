// One step's work for the forward pass: the new tokens of one or more sequences,
// flattened. A single user's decode is one sequence with one token; a prefill chunk is
// one sequence with many; continuous batching mixes them.
//
//   Batch b;
//   b.add_sequence(/*seq=*/0, /*start_pos=*/cache.n_tokens(0), prompt, /*logits=*/LogitRows::kLast);
//   model.forward(b, cache, logits);   // logits: [b.n_logit_rows()][n_vocab]
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ridge {

enum class LogitRows { kNone, kLast, kAll };

struct BatchSequence {
  int32_t seq = 0;        // KV cache sequence slot
  int32_t first = 0;      // first row of this sequence in the batch
  int32_t n_tokens = 0;   // rows first .. first + n_tokens - 1
  int32_t start_pos = 0;  // position of the first new token (= tokens already cached)
  int32_t n_tentative = 0;  // once committed, the sequence's last n_tentative tokens are
                            // speculative and may be truncated: windows keep their keys
};

struct Batch {
  std::vector<int32_t> tokens;       // [n_tokens]
  std::vector<int32_t> positions;    // [n_tokens]
  std::vector<BatchSequence> sequences;
  std::vector<int32_t> logit_rows;   // rows whose logits are wanted, ascending
  std::vector<int32_t> hidden_rows;  // rows whose final hidden states are wanted (embeddings),
                                     // ascending; a row may be in both lists

  // Appends a sequence's new tokens at positions start_pos, start_pos + 1, ...
  // n_tentative: see BatchSequence (speculative decoding).
  void add_sequence(int32_t seq, int32_t start_pos, std::span<const int32_t> new_tokens,
                    LogitRows logits, int32_t n_tentative = 0);
  // The same, with logits for the rows whose positions lie in [logits_from, logits_to]
  // (scoring a prompt: every position that predicts a known next token).
  void add_sequence(int32_t seq, int32_t start_pos, std::span<const int32_t> new_tokens, int32_t logits_from,
                    int32_t logits_to);
  // Asks for the final hidden states of rows first .. first + n - 1 (all of an embedded
  // sequence's rows, after add_sequence with LogitRows::kNone).
  void add_hidden_rows(int32_t first, int32_t n);
  void clear();
  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t n_logit_rows() const { return static_cast<int32_t>(logit_rows.size()); }
  int32_t n_hidden_rows() const { return static_cast<int32_t>(hidden_rows.size()); }
};

}  // namespace ridge
