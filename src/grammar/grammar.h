// A context-free grammar over bytes, parsed from llama.cpp's GBNF syntax: what constrained
// decoding (structured output, forced tool calls) matches generated text against.
//
//   Grammar g = parse_gbnf(R"(root ::= "yes" | "no" [!.]?)");   // throws GrammarError
//
// The syntax: rules `name ::= alternatives`, one per line (a rule continues over lines only
// inside parentheses or after `|`); a sequence of string literals ("a\n\"", escapes \n \r \t
// \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH), character classes ([a-z0-9_], [^"\\]), `.` (any
// character), rule names and parenthesized groups, each optionally followed by `*`, `+`,
// `?`, `{m}`, `{m,}` or `{m,n}`; `#` starts a comment. The start rule is `root`.
//
// Characters are Unicode code points, matched as their UTF-8 bytes: the compiled grammar is
// over bytes only (a class with non-ASCII members becomes a rule of byte sequences), so a
// token that ends in the middle of a character is matched as far as its bytes go.
// Repetitions compile to right-recursive helper rules; left recursion is an error (the
// matcher expands rules top-down).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace ridge::grammar {

// 256 bits: the bytes one grammar position accepts.
struct ByteSet {
  uint64_t bits[4] = {};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  bool operator==(const ByteSet&) const = default;
};

struct Element {
  enum class Kind : uint8_t { kEnd, kBytes, kRule };
  Kind kind = Kind::kEnd;
  int32_t value = 0;  // kBytes: index into Grammar::byte_sets; kRule: rule id
};

// The compiled form: every alternative of every rule is a run of elements ending in kEnd,
// all back to back in `elements`, so a position in the grammar is one index.
struct Grammar {
  std::vector<Element> elements;
  std::vector<std::vector<int32_t>> rules;  // rule id -> the element index each alternative starts at
  std::vector<std::string> rule_names;      // helper rules: "name_3" after the rule they came from
  std::vector<ByteSet> byte_sets;
  int32_t root = 0;
};

// A grammar that does not parse or cannot be matched; the message names the line and column
// (or the rule) at fault.
class GrammarError : public Error {
 public:
  using Error::Error;
};

Grammar parse_gbnf(std::string_view text, std::string_view root = "root");

// The text of a GBNF string literal matching exactly `bytes` ("\"a\\\"b\"" for a"b).
std::string gbnf_literal(std::string_view bytes);

}  // namespace ridge::grammar
