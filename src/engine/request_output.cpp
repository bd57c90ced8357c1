#include "engine/request_output.h"

namespace ridge {

RequestOutput::RequestOutput(const Tokenizer& tokenizer, std::vector<std::string> stop,
                             bool ignore_eos, int32_t max_tokens)
    : tokenizer_(tokenizer), stop_(std::move(stop)), ignore_eos_(ignore_eos), max_tokens_(max_tokens) {}

FinishReason RequestOutput::push(int32_t token, std::string& text) {
  ++n_generated_;
  FinishReason reason = FinishReason::kNone;
  if (!ignore_eos_ && tokenizer_.is_end_of_generation(token)) {
    reason = FinishReason::kStop;
  } else if (stop_.push(utf8_.push(tokenizer_.token_to_piece(token)), text)) {
    return FinishReason::kStop;
  }
  if (reason == FinishReason::kNone && n_generated_ >= max_tokens_) reason = FinishReason::kLength;
  if (reason != FinishReason::kNone) {
    // The end: release what was held back (an incomplete character may still complete a
    // stop string).
    if (stop_.push(utf8_.flush(), text)) return FinishReason::kStop;
    stop_.flush(text);
  }
  return reason;
}

}  // namespace ridge
