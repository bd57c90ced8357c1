// The syntax side of the regex engine (internal to the tokenizer room): character classes,
// the parsed pattern tree, and the parser. regex.cpp compiles the tree and runs it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace ridge::regex_syntax {

constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();  // {n,} upper bound
constexpr uint32_t kMaxRepeatCount = 1000;  // {n,m} bound; llama.cpp's largest is 512

inline bool is_ascii_word(uint32_t cp) {
  return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') || cp == '_';
}
inline bool is_ascii_digit(uint32_t cp) { return cp >= '0' && cp <= '9'; }

// A set of code points. ASCII membership is precomputed (negation folded in); beyond ASCII
// the set is a union of general categories, whitespace / non-whitespace, literal ranges, or
// everything, and negated is applied on top.
struct CharClass {
  std::array<uint64_t, 2> ascii{};
  uint32_t categories = 0;
  bool whitespace = false;
  bool not_whitespace = false;
  bool all_non_ascii = false;
  bool negated = false;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // sorted, disjoint, all >= 128

  void set_ascii(uint32_t cp) { ascii[cp >> 6] |= uint64_t{1} << (cp & 63); }
  bool ascii_has(uint32_t cp) const { return (ascii[cp >> 6] >> (cp & 63)) & 1; }

  void add_range(uint32_t lo, uint32_t hi) {
    for (uint32_t cp = lo; cp <= hi && cp < 128; ++cp) set_ascii(cp);
    if (hi >= 128) ranges.emplace_back(std::max<uint32_t>(lo, 128), hi);
  }
  void add_categories(uint32_t mask, bool except_tilde) {
    for (uint32_t cp = 0; cp < 128; ++cp) {
      if ((mask >> static_cast<unsigned>(unicode::category(cp))) & 1 && !(except_tilde && cp == '~')) {
        set_ascii(cp);
      }
    }
    categories |= mask;
  }
  void add_whitespace(bool negate) {
    for (uint32_t cp = 0; cp < 128; ++cp) {
      if (unicode::is_whitespace(cp) != negate) set_ascii(cp);
    }
    (negate ? not_whitespace : whitespace) = true;
  }
  // \d \w (ASCII sets, as ECMAScript defines them) and their complements \D \W.
  template <class Pred>
  void add_ascii_set(Pred in_set, bool negate) {
    for (uint32_t cp = 0; cp < 128; ++cp) {
      if (in_set(cp) != negate) set_ascii(cp);
    }
    if (negate) all_non_ascii = true;
  }

  void finalize() {
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<uint32_t, uint32_t>> merged;
    for (const auto& r : ranges) {
      if (!merged.empty() && r.first <= merged.back().second + 1) {
        merged.back().second = std::max(merged.back().second, r.second);
      } else {
        merged.push_back(r);
      }
    }
    ranges = std::move(merged);
    if (negated) ascii = {~ascii[0], ~ascii[1]};
  }

  bool non_ascii_member(uint32_t cp, uint8_t info) const {
    if (all_non_ascii) return true;
    if ((categories >> (info & DecodedText::kCategoryBits)) & 1) return true;
    if ((info & DecodedText::kWhitespaceBit) ? whitespace : not_whitespace) return true;
    auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                               [](uint32_t value, const auto& r) { return value < r.first; });
    return it != ranges.begin() && cp <= (it - 1)->second;
  }
  bool matches(uint32_t cp, uint8_t info) const {
    if (cp < 128) return ascii_has(cp);
    return non_ascii_member(cp, info) != negated;
  }
  bool may_match_non_ascii() const {
    return negated || all_non_ascii || categories || whitespace || not_whitespace || !ranges.empty();
  }
};

enum class Assertion : uint32_t { kBegin, kEnd, kWordBoundary, kNotWordBoundary };

struct Node {
  enum class Kind : uint8_t { kEmpty, kChar, kClass, kConcat, kAlternation, kRepeat, kLookahead, kAssert };
  Kind kind = Kind::kEmpty;
  uint32_t value = 0;  // kChar: code point; kClass: class index; kAssert: Assertion
  uint32_t min = 0;    // kRepeat bounds (max may be kUnbounded)
  uint32_t max = 0;
  bool greedy = true;    // kRepeat
  bool negated = false;  // kLookahead
  std::vector<Node> children;
};

// Parses pattern (UTF-8) into a tree; the classes it uses are appended to classes (finalized)
// and referred to by index. Throws ridge::Error naming the pattern and byte offset.
Node parse(std::string_view pattern, RegexOptions options, std::vector<CharClass>& classes);

}  // namespace ridge::regex_syntax
