// Pre-tokenization for byte-level BPE: splits text into the pieces BPE merges within, exactly
// as llama.cpp does for each GGUF `tokenizer.ggml.pre` value. Each pre-tokenizer is a list of
// regexes applied one after another; each splits every piece the previous one produced, and
// both its matches and the unmatched stretches between them become pieces, in order.
//
//   ridge::PreTokenizer pre = ridge::PreTokenizer::for_name("llama-bpe");
//   std::vector<std::string_view> pieces = pre.split("Hello world!!");  // "Hello" " world" "!!"
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace ridge {

class PreTokenizer {
 public:
  // The pre-tokenizer for a GGUF `tokenizer.ggml.pre` value ("gpt-2", "llama-bpe", "qwen2",
  // "default", ...). Throws ridge::Error listing the known names if pre is unknown.
  static PreTokenizer for_name(std::string_view pre);
  // Every name for_name accepts, sorted.
  static std::vector<std::string> known_names();
  // A pre-tokenizer from a list of regexes (regex.h syntax, llama.cpp's \p{..} meaning).
  // Patterns llama.cpp has hand-written splitters for (GPT-2, Llama 3, Qwen 2) use ours unless
  // fast_paths is false; tests turn them off to compare against the regex engine.
  static PreTokenizer from_patterns(std::string name, std::vector<std::string> patterns,
                                    bool fast_paths = true);

  // Splits UTF-8 text into consecutive, non-empty pieces (views into text) covering all of it,
  // in order. Malformed UTF-8 is split as if each bad byte were U+FFFD (a symbol); the views
  // keep the original bytes.
  std::vector<std::string_view> split(std::string_view text) const;
  // The same on text decoded already: appends the end (code point index) of every piece.
  void split(const DecodedText& text, std::vector<size_t>& piece_ends) const;

  const std::string& name() const { return name_; }
  // The regexes llama.cpp lists for this pre-tokenizer, in the order they are applied.
  const std::vector<std::string>& patterns() const { return patterns_; }
  // False for the pre-tokenizers whose BPE runs on raw UTF-8 (gemma4, sarvam-moe, whitespace);
  // true where pieces go through unicode::byte_to_unicode before merging (all others).
  bool byte_encode() const { return byte_encode_; }

  struct Stage;  // one regex, or a hand-written equivalent; defined in pretokenizer.cpp

 private:
  std::string name_;
  std::vector<std::string> patterns_;
  std::shared_ptr<const std::vector<Stage>> stages_;
  bool byte_encode_ = true;
};

}  // namespace ridge
