#include "tokenizer/regex_syntax.h"

#include <optional>
#include <string>

#include "core/error.h"

namespace ridge::regex_syntax {
namespace {

using unicode::Category;

constexpr uint32_t kAllCategories = (1u << unicode::kCategoryCount) - 1;

// Whether n can match the empty string.
bool nullable(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kChar:
    case Node::Kind::kClass:
      return false;
    case Node::Kind::kConcat:
      return std::all_of(n.children.begin(), n.children.end(), nullable);
    case Node::Kind::kAlternation:
      return std::any_of(n.children.begin(), n.children.end(), nullable);
    case Node::Kind::kRepeat:
      return n.min == 0 || nullable(n.children[0]);
    default:
      return true;
  }
}

// Category names accepted in \p{..}, with the mask each stands for.
std::optional<uint32_t> category_mask(std::u32string_view name) {
  if (name.size() == 1) {
    switch (name[0]) {
      case 'L': return unicode::kLetterMask;
      case 'M': return unicode::kMarkMask;
      case 'N': return unicode::kNumberMask;
      case 'P': return unicode::kPunctuationMask;
      case 'S': return unicode::kSymbolMask;
      case 'Z': return unicode::kSeparatorMask;
      case 'C': return unicode::kOtherMask;
      default: return std::nullopt;
    }
  }
  for (int c = 0; c < unicode::kCategoryCount; ++c) {
    std::string_view n = unicode::category_name(static_cast<Category>(c));
    if (name.size() == 2 && name[0] == static_cast<unsigned char>(n[0]) &&
        name[1] == static_cast<unsigned char>(n[1])) {
      return 1u << c;
    }
  }
  return std::nullopt;
}

class Parser {
 public:
  Parser(std::string_view pattern, RegexOptions options, std::vector<CharClass>& classes)
      : pattern_(pattern), options_(options), classes_(classes) {
    size_t pos = 0;
    while (pos < pattern.size()) {
      offsets_.push_back(pos);
      const size_t start = pos;
      const uint32_t cp = unicode::decode_utf8(pattern, pos);
      if (cp == unicode::kInvalid && pos - start == 1) fail_at(start, "invalid UTF-8");
      cps_.push_back(cp);
    }
    offsets_.push_back(pattern.size());
  }

  Node parse() {
    Node root = parse_alternation();
    if (!at_end()) fail(peek() == ')' ? "unmatched ')'" : "unexpected character");
    return root;
  }

 private:
  [[noreturn]] void fail_at(size_t byte_offset, std::string_view what) const {
    throw Error(str_cat("regex: ", what, " at byte ", byte_offset, " of pattern '", pattern_, "'"));
  }
  [[noreturn]] void fail(std::string_view what) const { fail_at(offsets_[std::min(i_, cps_.size())], what); }

  bool at_end() const { return i_ >= cps_.size(); }
  uint32_t peek(size_t ahead = 0) const { return i_ + ahead < cps_.size() ? cps_[i_ + ahead] : 0; }
  bool has(size_t ahead) const { return i_ + ahead < cps_.size(); }
  uint32_t next() {
    if (at_end()) fail("unexpected end of pattern");
    return cps_[i_++];
  }
  bool accept(uint32_t cp) {
    if (!at_end() && cps_[i_] == cp) {
      ++i_;
      return true;
    }
    return false;
  }

  uint32_t new_class(CharClass cls) {
    cls.finalize();
    classes_.push_back(std::move(cls));
    return static_cast<uint32_t>(classes_.size() - 1);
  }
  static Node leaf(Node::Kind kind, uint32_t value) {
    Node n;
    n.kind = kind;
    n.value = value;
    return n;
  }

  Node parse_alternation() {
    Node first = parse_sequence();
    if (at_end() || peek() != '|') return first;
    Node alt;
    alt.kind = Node::Kind::kAlternation;
    alt.children.push_back(std::move(first));
    while (accept('|')) alt.children.push_back(parse_sequence());
    return alt;
  }

  Node parse_sequence() {
    Node seq;
    seq.kind = Node::Kind::kConcat;
    while (!at_end() && peek() != '|' && peek() != ')') seq.children.push_back(parse_quantified());
    if (seq.children.size() == 1) return std::move(seq.children[0]);
    if (seq.children.empty()) return Node{};
    return seq;
  }

  // Reads {n}, {n,}, {n,m} at the cursor if present; otherwise leaves the cursor alone.
  bool parse_braces(uint32_t& min, uint32_t& max) {
    size_t j = i_ + 1;
    auto number = [&](uint32_t& out) {
      const size_t start = j;
      uint64_t value = 0;
      while (j < cps_.size() && is_ascii_digit(cps_[j])) {
        value = std::min<uint64_t>(value * 10 + (cps_[j] - '0'), uint64_t{kMaxRepeatCount} + 1);
        ++j;
      }
      out = static_cast<uint32_t>(value);
      return j > start;
    };
    if (!number(min)) return false;
    max = min;
    if (j < cps_.size() && cps_[j] == ',') {
      ++j;
      if (!number(max)) max = kUnbounded;
    }
    if (j >= cps_.size() || cps_[j] != '}') return false;
    i_ = j + 1;
    return true;
  }

  Node parse_quantified() {
    const size_t atom_start = i_;
    Node atom = parse_atom();
    uint32_t min = 0;
    uint32_t max = 0;
    const uint32_t c = at_end() ? 0 : peek();
    if (c == '*') {
      ++i_, min = 0, max = kUnbounded;
    } else if (c == '+') {
      ++i_, min = 1, max = kUnbounded;
    } else if (c == '?') {
      ++i_, min = 0, max = 1;
    } else if (c == '{' && parse_braces(min, max)) {
      if ((min > kMaxRepeatCount) || (max != kUnbounded && max > kMaxRepeatCount)) {
        fail(str_cat("repeat count above ", kMaxRepeatCount));
      }
      if (max < min) fail("repeat range {n,m} with m < n");
    } else {
      return atom;
    }
    if (atom.kind == Node::Kind::kLookahead || atom.kind == Node::Kind::kAssert) {
      fail_at(offsets_[atom_start], "quantifier on an assertion");
    }
    Node rep;
    rep.kind = Node::Kind::kRepeat;
    rep.min = min;
    rep.max = max;
    if (accept('?')) {
      rep.greedy = false;
    } else if (!at_end() && peek() == '+') {
      fail("possessive quantifiers are not supported");
    }
    if (!at_end() && (peek() == '*' || peek() == '+' || peek() == '?' ||
                      (peek() == '{' && is_ascii_digit(peek(1))))) {
      fail("nothing to repeat (double quantifier)");
    }
    if (max == kUnbounded && nullable(atom)) {
      fail_at(offsets_[atom_start], "unbounded repetition of something that can match empty");
    }
    rep.children.push_back(std::move(atom));
    return rep;
  }

  Node parse_atom() {
    const uint32_t c = next();
    switch (c) {
      case '(':
        return parse_group();
      case '[':
        return leaf(Node::Kind::kClass, parse_class());
      case '.': {
        // ECMAScript: anything but a line terminator.
        CharClass any;
        any.negated = true;
        for (uint32_t t : {0x0Au, 0x0Du, 0x2028u, 0x2029u}) any.add_range(t, t);
        return leaf(Node::Kind::kClass, new_class(std::move(any)));
      }
      case '^':
        return leaf(Node::Kind::kAssert, static_cast<uint32_t>(Assertion::kBegin));
      case '$':
        return leaf(Node::Kind::kAssert, static_cast<uint32_t>(Assertion::kEnd));
      case '\\':
        return parse_escape_atom();
      case '*':
      case '+':
      case '?':
        --i_;
        fail("nothing to repeat");
      case ')':
        --i_;
        fail("unmatched ')'");
      case '{': {
        --i_;
        uint32_t min = 0;
        uint32_t max = 0;
        const size_t save = i_;
        if (parse_braces(min, max)) {
          i_ = save;
          fail("nothing to repeat");
        }
        ++i_;
        return leaf(Node::Kind::kChar, c);
      }
      default:
        return leaf(Node::Kind::kChar, c);
    }
  }

  Node parse_group() {
    Node group;
    if (accept('?')) {
      const uint32_t kind = next();
      if (kind == ':') {
        // plain group
      } else if (kind == '=' || kind == '!') {
        group.kind = Node::Kind::kLookahead;
        group.negated = kind == '!';
      } else if (kind == '<') {
        fail("lookbehind and named groups are not supported");
      } else {
        fail("inline flags such as (?i:...) are not supported");
      }
    }
    Node body = parse_alternation();
    if (!accept(')')) fail("missing ')'");
    if (group.kind == Node::Kind::kLookahead) {
      group.children.push_back(std::move(body));
      return group;
    }
    return body;  // capturing and non-capturing groups behave alike: no captures are kept
  }

  // Adds \d \D \w \W \s \S \p{..} \P{..} (letter already read) to cls; false if letter is
  // not one of these.
  bool parse_set_escape(uint32_t letter, CharClass& cls) {
    switch (letter) {
      case 'd':
      case 'D':
        cls.add_ascii_set(is_ascii_digit, letter == 'D');
        return true;
      case 'w':
      case 'W':
        cls.add_ascii_set(is_ascii_word, letter == 'W');
        return true;
      case 's':
      case 'S':
        cls.add_whitespace(letter == 'S');
        return true;
      case 'p':
      case 'P': {
        if (!accept('{')) fail("expected '{' after \\p");
        std::u32string name;
        while (!at_end() && peek() != '}') name.push_back(next());
        if (!accept('}')) fail("missing '}' in \\p{...}");
        std::optional<uint32_t> mask = category_mask(name);
        if (!mask) fail("unknown Unicode category in \\p{...}");
        bool except_tilde = false;
        if (options_.llama_cpp) {
          if (*mask & unicode::kLetterMask) mask = unicode::kLetterMask;
          except_tilde = *mask == unicode::kSymbolMask;
        }
        if (letter == 'P') {
          cls.add_categories(kAllCategories & ~*mask, false);
        } else {
          cls.add_categories(*mask, except_tilde);
        }
        return true;
      }
      default:
        return false;
    }
  }

  uint32_t parse_hex(size_t digits) {
    uint32_t value = 0;
    for (size_t k = 0; k < digits; ++k) {
      const uint32_t h = next();
      int v = (h >= '0' && h <= '9') ? int(h - '0')
              : (h >= 'a' && h <= 'f') ? int(h - 'a' + 10)
              : (h >= 'A' && h <= 'F') ? int(h - 'A' + 10)
                                       : -1;
      if (v < 0) fail("bad hex digit in escape");
      value = value * 16 + static_cast<uint32_t>(v);
    }
    return value;
  }

  // A single code point written as an escape (letter already read).
  uint32_t parse_literal_escape(uint32_t letter, bool in_class) {
    switch (letter) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case 'b':
        if (in_class) return '\b';
        break;
      case 'x':
        return parse_hex(2);
      case 'u': {
        if (!accept('{')) return parse_hex(4);
        uint32_t value = 0;
        size_t count = 0;
        while (!at_end() && peek() != '}' && count < 6) value = value * 16 + parse_hex(1), ++count;
        if (!accept('}') || count == 0 || value > unicode::kMaxCodePoint) fail("bad \\u{...} escape");
        return value;
      }
      default:
        if (letter < 128 && !is_ascii_word(letter)) return letter;  // escaped punctuation
        if (letter >= 128) return letter;
        break;
    }
    --i_;
    fail("unknown escape");
  }

  Node parse_escape_atom() {
    const uint32_t letter = next();
    if (letter == 'b' || letter == 'B') {
      return leaf(Node::Kind::kAssert, static_cast<uint32_t>(letter == 'b' ? Assertion::kWordBoundary
                                                                           : Assertion::kNotWordBoundary));
    }
    CharClass cls;
    if (parse_set_escape(letter, cls)) return leaf(Node::Kind::kClass, new_class(std::move(cls)));
    return leaf(Node::Kind::kChar, parse_literal_escape(letter, false));
  }

  // After '['; returns the class index.
  uint32_t parse_class() {
    CharClass cls;
    cls.negated = accept('^');
    for (;;) {
      if (at_end()) fail("missing ']'");
      if (accept(']')) break;  // as in ECMAScript, [] matches nothing and [^] anything
      // One item: a set escape, or a code point that may start a range.
      uint32_t lo = next();
      if (lo == '\\') {
        const uint32_t letter = next();
        if (parse_set_escape(letter, cls)) continue;
        lo = parse_literal_escape(letter, true);
      }
      if (!at_end() && peek() == '-' && has(1) && peek(1) != ']') {
        ++i_;  // '-'
        uint32_t hi = next();
        if (hi == '\\') {
          const uint32_t letter = next();
          CharClass probe;
          if (parse_set_escape(letter, probe)) fail("class range ends in a set escape");
          hi = parse_literal_escape(letter, true);
        }
        if (hi < lo) fail("class range out of order");
        cls.add_range(lo, hi);
      } else {
        cls.add_range(lo, lo);
      }
    }
    return new_class(std::move(cls));
  }

  std::string_view pattern_;
  RegexOptions options_;
  std::vector<CharClass>& classes_;
  std::vector<uint32_t> cps_;
  std::vector<size_t> offsets_;  // byte offset of each pattern code point
  size_t i_ = 0;
};

}  // namespace

Node parse(std::string_view pattern, RegexOptions options, std::vector<CharClass>& classes) {
  return Parser(pattern, options, classes).parse();
}

}  // namespace ridge::regex_syntax
