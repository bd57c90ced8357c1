// A small backtracking regex engine over Unicode code points, made for the pre-tokenizer
// patterns of llama.cpp and Hugging Face tokenizers. Semantics are ECMAScript's (what
// llama.cpp's std::regex gives): at each position the first alternative that leads to a match
// wins, quantifiers are greedy (or lazy with a trailing ?) and backtrack; \d \w \b are ASCII;
// \s is Unicode White_Space; \p{..} are Unicode general categories.
//
//   ridge::Regex re(R"( ?\p{L}+| ?\p{N}+)");
//   ridge::DecodedText text("Hello world");
//   std::vector<ridge::Regex::Match> found;
//   re.find_all(text, 0, text.size(), found);   // {0,5} "Hello", {5,11} " world"
//
// Supported: literals (any code point), escapes \s \S \d \D \w \W \b \B \r \n \t \f \v \0
// \xHH \uHHHH \u{H..} and escaped punctuation, `.`, classes [...] with ranges and negation,
// \p{X} / \P{X} for X in L Lu Ll Lt Lm Lo M Mn Mc Me N Nd Nl No P Pc Pd Ps Pe Pi Pf Po S Sm Sc
// Sk So Z Zs Zl Zp C Cc Cf Cs Co Cn (inside and outside classes), groups (...) and (?:...)
// (both non-capturing here), alternation, ? * + {n} {n,} {n,m} (greedy, or lazy with ?),
// lookahead (?=...) (?!...), anchors ^ $ (ends of the searched range).
// Not supported (constructor throws ridge::Error): lookbehind, backreferences, possessive
// quantifiers, inline flags such as (?i:...), and unbounded repetition of something that can
// match the empty string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ridge {

// UTF-8 text decoded once for matching: the code points, one byte per code point holding its
// general category and a whitespace bit, and the byte offset where each code point starts.
// Malformed UTF-8 decodes byte by byte to U+FFFD (see unicode::decode_utf8).
class DecodedText {
 public:
  static constexpr uint8_t kCategoryBits = 0x1F;  // low bits: unicode::Category value
  static constexpr uint8_t kWhitespaceBit = 0x80;

  explicit DecodedText(std::string_view utf8);

  size_t size() const { return code_points_.size(); }
  uint32_t code_point(size_t i) const { return code_points_[i]; }
  uint8_t info(size_t i) const { return info_[i]; }
  bool is_whitespace(size_t i) const { return info_[i] & kWhitespaceBit; }
  // Byte offset of code point i in the original text; byte_offset(size()) is its length.
  size_t byte_offset(size_t i) const { return byte_offsets_[i]; }
  std::string_view utf8() const { return utf8_; }

 private:
  std::string_view utf8_;
  std::vector<uint32_t> code_points_;
  std::vector<uint8_t> info_;
  std::vector<uint32_t> byte_offsets_;
};

struct RegexOptions {
  // Match the way llama.cpp's std::regex fallback does (its unicode_regex_split), which
  // differs from plain Unicode semantics in three ways:
  //  * it rewrites \p{L} \p{N} \p{P} \p{S} \p{M} into classes of placeholder bytes, so \p{Lu}
  //    \p{Ll} \p{Lt} \p{Lm} \p{Lo} all mean \p{L};
  //  * its ASCII symbol list omits '~', so \p{S} does not match '~';
  //  * it replaces every non-ASCII whitespace code point (U+00A0, U+3000, ...) by U+000B
  //    before matching, so such a code point matches \s and [^...] but not itself.
  // The pre-tokenizer sets this to reproduce llama.cpp's splits exactly.
  bool llama_cpp = false;
};

class Regex {
 public:
  // Compiles pattern (UTF-8); throws ridge::Error naming the pattern and offset on bad syntax.
  explicit Regex(std::string_view pattern, RegexOptions options = {});
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  const std::string& pattern() const { return pattern_; }

  // Where a match that starts exactly at code point pos ends (code point index), or nullopt.
  // Only text[begin, end) is visible: ^ $ and \b treat its ends as the ends of the text.
  // With allow_empty false an empty match counts as no match (the search goes on for a
  // non-empty one, as std::regex's match_not_null does).
  std::optional<size_t> match_at(const DecodedText& text, size_t begin, size_t end, size_t pos,
                                 bool allow_empty = true) const;

  struct Match {
    size_t begin;  // code point indices, [begin, end)
    size_t end;
  };
  // Appends every match in text[begin, end), left to right, the way std::regex_iterator and
  // Python's finditer find them: after a match ending at p the search resumes at p; after an
  // empty match at p, a non-empty match at p is tried first, then the search resumes at p+1.
  void find_all(const DecodedText& text, size_t begin, size_t end, std::vector<Match>& out) const;

  // Convenience on plain UTF-8 (decodes on every call): the byte length of the match starting
  // at byte offset byte_pos, or nullopt.
  std::optional<size_t> match_prefix(std::string_view utf8, size_t byte_pos = 0) const;
  // Convenience: the text of every match in utf8.
  std::vector<std::string_view> find_all(std::string_view utf8) const;

  struct Program;  // compiled form, defined in regex.cpp

 private:
  std::string pattern_;
  std::unique_ptr<const Program> program_;
};

}  // namespace ridge
