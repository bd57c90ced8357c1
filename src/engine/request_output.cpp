#include "engine/request_output.h"

#include <algorithm>
#include <utility>

namespace ridge {
namespace {

// Length of the UTF-8 sequence a lead byte starts (1 for invalid leads: pass them through).
size_t utf8_length(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF8) return 4;
  return 1;
}

}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  // Find the start of the last character; keep it back if it is not complete yet.
  size_t cut = pending_.size();
  for (size_t back = 1; back <= std::min<size_t>(4, pending_.size()); ++back) {
    unsigned char c = static_cast<unsigned char>(pending_[pending_.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    if (utf8_length(c) > back) cut = pending_.size() - back;
    break;
  }
  std::string out = pending_.substr(0, cut);
  pending_.erase(0, cut);
  return out;
}

std::string Utf8Stream::flush() { return std::exchange(pending_, {}); }

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
