// One request's generated tokens turned into streamed text: pieces joined into whole UTF-8
// characters, text held back while it may start a stop string, and the reason generation
// ends (end-of-generation token unless ignore_eos, a stop string, max_tokens).
//
//   RequestOutput out(tokenizer, {"\n\n"}, /*ignore_eos=*/false, /*max_tokens=*/64);
//   std::string text;
//   FinishReason r = out.push(token, text);   // text: what this token releases (may be "")
//   if (r != FinishReason::kNone) ...         // the last token; text includes the remainder
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <string_view>

#include "engine/stop_strings.h"
#include "tokenizer/tokenizer.h"

namespace ridge {

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

// Holds back the bytes of an incomplete UTF-8 character at the end of streamed text.
class Utf8Stream {
 public:
  // Appends bytes; returns the longest prefix of the pending text that ends on a
  // character boundary (removing it from the pending text).
  std::string push(std::string_view bytes);
  std::string flush();  // whatever is left, complete or not

 private:
  std::string pending_;
};

class RequestOutput {
 public:
  RequestOutput(const Tokenizer& tokenizer, std::vector<std::string> stop, bool ignore_eos,
                int32_t max_tokens);

  // Takes the next generated token; appends the text it releases. Returns kStop (an
  // end-of-generation token, which shows no text, or a stop string, which is cut with all
  // after it), kLength (max_tokens reached; held-back text is released), or kNone.
  FinishReason push(int32_t token, std::string& text);
  int32_t n_generated() const { return n_generated_; }

 private:
  const Tokenizer& tokenizer_;
  Utf8Stream utf8_;
  StopMatcher stop_;
  bool ignore_eos_ = false;
  int32_t max_tokens_ = 0;
  int32_t n_generated_ = 0;
};

}  // namespace ridge
