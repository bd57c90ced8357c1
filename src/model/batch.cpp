#include "model/batch.h"

namespace ridge {

void Batch::add_sequence(int32_t seq, int32_t start_pos, std::span<const int32_t> new_tokens,
                         LogitRows logits, int32_t n_tentative) {
  const int32_t first = n_tokens();
  const int32_t n = static_cast<int32_t>(new_tokens.size());
  sequences.push_back(BatchSequence{seq, first, n, start_pos, n_tentative});
  for (int32_t i = 0; i < n; ++i) {
    tokens.push_back(new_tokens[i]);
    positions.push_back(start_pos + i);
    if (logits == LogitRows::kAll || (logits == LogitRows::kLast && i == n - 1)) logit_rows.push_back(first + i);
  }
}

void Batch::add_sequence(int32_t seq, int32_t start_pos, std::span<const int32_t> new_tokens, int32_t logits_from,
                         int32_t logits_to) {
  const int32_t first = n_tokens();
  const int32_t n = static_cast<int32_t>(new_tokens.size());
  sequences.push_back(BatchSequence{seq, first, n, start_pos, 0});
  for (int32_t i = 0; i < n; ++i) {
    tokens.push_back(new_tokens[i]);
    positions.push_back(start_pos + i);
    if (start_pos + i >= logits_from && start_pos + i <= logits_to) logit_rows.push_back(first + i);
  }
}

void Batch::add_hidden_rows(int32_t first, int32_t n) {
  for (int32_t i = 0; i < n; ++i) hidden_rows.push_back(first + i);
}

void Batch::clear() {
  tokens.clear();
  positions.clear();
  sequences.clear();
  logit_rows.clear();
  hidden_rows.clear();
}

}  // namespace ridge
